"""Placement groups for hotswap's groups: one bundle per replica (or trainer rank), checked
against the cluster before Ray is asked, and a bounded wait with a message naming what is
missing, where Ray itself would wait for an infeasible group forever."""

import time

import ray
from ray.util.placement_group import placement_group, remove_placement_group

# hotswap's names for Ray's strategies: "spread" puts replicas on distinct nodes where it can,
# "pack" on as few as it can; the strict ones refuse otherwise.
STRATEGIES = {"spread": "SPREAD", "pack": "PACK", "strict_spread": "STRICT_SPREAD",
              "strict_pack": "STRICT_PACK"}


class PlacementError(RuntimeError):
    """A group that this cluster cannot place, or could not place within the timeout."""


def bundle_for(resources_per_rank, ranks):
    """One replica's bundle: every one of its ranks' resources, on one node (vLLM's rule for a
    tensor-parallel group)."""
    if not resources_per_rank:
        raise ValueError("resources_per_rank is empty: say what a rank needs, e.g. {'GPU': 1} "
                         "or {'CPU': 2}")
    bundle = {}
    for name, amount in resources_per_rank.items():
        if not isinstance(amount, (int, float)) or amount < 0:
            raise ValueError(f"resources_per_rank[{name!r}] must be a number >= 0, not {amount!r}")
        if amount:
            bundle[name] = amount * ranks
    return bundle


def actor_options(bundle):
    """The actor that holds a whole bundle: Ray's num_cpus, num_gpus and custom resources."""
    custom = {k: v for k, v in bundle.items() if k not in ("CPU", "GPU")}
    options = {"num_cpus": bundle.get("CPU", 0), "num_gpus": bundle.get("GPU", 0)}
    if custom:
        options["resources"] = custom
    return options


def _shown(resources):
    # Ray's own bookkeeping keys (node:<ip>, memory, accelerator types) say nothing useful here.
    keep = {k: v for k, v in resources.items()
            if not k.startswith(("node:", "accelerator_type:")) and
            k not in ("memory", "object_store_memory")}
    return "{" + ", ".join(f"{k}: {v:g}" for k, v in sorted(keep.items())) + "}"


def describe_nodes():
    """Each alive node's address, id (shortened) and total resources, for an error message."""
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    return "; ".join(f"{n['NodeManagerAddress']} ({n['NodeID'][:8]}) {_shown(n['Resources'])}"
                     for n in nodes) or "no alive node"


def check_feasible(what, bundles, strategy):
    """Raises PlacementError at once when no amount of waiting could place `bundles`: the
    cluster lacks the resources in all, no node can hold one bundle, or a strict spread has
    fewer nodes than bundles."""
    nodes = [n["Resources"] for n in ray.nodes() if n.get("Alive")]
    totals = {}
    for resources in nodes:
        for k, v in resources.items():
            totals[k] = totals.get(k, 0) + v
    need = {}
    for bundle in bundles:
        for k, v in bundle.items():
            need[k] = need.get(k, 0) + v
    lacking = [f"{v:g} {k} in all (the cluster has {totals.get(k, 0):g})"
               for k, v in sorted(need.items()) if totals.get(k, 0) < v]
    fits = [all(node.get(k, 0) >= v for k, v in bundles[0].items()) for node in nodes]
    if not lacking and not any(fits):
        lacking.append(f"one node with {_shown(bundles[0])} (no node has that much)")
    if not lacking and strategy == "STRICT_SPREAD" and sum(fits) < len(bundles):
        lacking.append(f"{len(bundles)} distinct nodes with {_shown(bundles[0])} each "
                       f"(only {sum(fits)} have that much)")
    if strategy == "STRICT_PACK" and not lacking:
        whole = {k: v for k, v in need.items()}
        if not any(all(node.get(k, 0) >= v for k, v in whole.items()) for node in nodes):
            lacking.append(f"one node with {_shown(whole)} for every bundle (strict_pack)")
    if lacking:
        raise PlacementError(
            f"{what} cannot be placed: it needs {', '.join(lacking)}. {len(bundles)} bundle(s) "
            f"of {_shown(bundles[0])}, strategy {strategy}. Nodes: {describe_nodes()}")


def reserve(what, bundles, strategy, timeout, fail_fast=True):
    """A ready placement group for `bundles`, or PlacementError: at once when the cluster as it
    is can never hold it (unless not `fail_fast`: a cluster that autoscales adds nodes for a
    pending group), after `timeout` seconds when its resources stay taken (the group is then
    removed, so nothing stays reserved; on any other exit too)."""
    strategy = STRATEGIES.get(strategy, strategy)
    if strategy not in STRATEGIES.values():
        raise ValueError(f"placement must be one of {sorted(STRATEGIES)}, not {strategy!r}")
    if fail_fast:
        check_feasible(what, bundles, strategy)
    group = placement_group(bundles, strategy=strategy)
    try:
        start = time.monotonic()
        ready, _ = ray.wait([group.ready()], timeout=timeout)
        if not ready:
            raise PlacementError(
                f"{what} was not placed within {timeout:g} s: {len(bundles)} bundle(s) of "
                f"{_shown(bundles[0])}, strategy {strategy}; free now in the cluster: "
                f"{_shown(ray.available_resources())}. Nodes: {describe_nodes()}")
        ray.get(ready[0], timeout=max(1.0, timeout - (time.monotonic() - start)))
    except BaseException:
        remove_placement_group(group)
        raise
    return group


def release(actors, group, last_call, timeout):
    """A group's teardown: `last_call(actor)` on every actor at once (each stops what it runs),
    waited for at most `timeout` seconds; then every actor is killed (no restart) and the
    placement group removed. Each step is tried whatever the others did."""
    refs = []
    for actor in actors:
        try:
            refs.append(last_call(actor))
        except Exception:  # noqa: BLE001  (an actor already gone has nothing to stop)
            pass
    if refs:
        ray.wait(refs, num_returns=len(refs), timeout=timeout)
    for actor in actors:
        try:
            ray.kill(actor, no_restart=True)
        except Exception:  # noqa: BLE001
            pass
    if group is not None:
        remove_placement_group(group)
