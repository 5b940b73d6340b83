"""GroupLedger: where a worker group's replicas say what happened to them.

One small actor per group (no CPU reserved). A replica's actor records each worker it made
ready and each worker it saw die; the actor is gone between a worker's death and Ray's restart
of it, so this is what lets the group tell a trainer which replicas were replaced, and why.
"""

import time


class GroupLedger:
    def __init__(self, replicas):
        self.replicas = replicas
        self.current = [None] * replicas  # each replica's info as its worker became ready
        self.exits = [[] for _ in range(replicas)]
        self.events = []

    def ready(self, info):
        replica = info["replica"]
        self.current[replica] = dict(info)
        self.events.append({"event": "ready", "time": time.time(), **info})

    def exited(self, replica, incarnation, returncode, log_tail):
        """A replica's worker exited while it was meant to serve; its actor exits next, for Ray
        to restart it."""
        record = {"event": "exited", "time": time.time(), "replica": replica,
                  "incarnation": incarnation, "returncode": returncode, "log_tail": log_tail}
        if self.current[replica] is not None and \
                self.current[replica]["incarnation"] == incarnation:
            self.current[replica] = None
        self.exits[replica].append(record)
        self.events.append(record)

    def previous(self, replica):
        """The info of the replica's worker before this one (its node and endpoint), or None."""
        ready = [e for e in self.events if e["event"] == "ready" and e["replica"] == replica]
        return ready[-1] if ready else None

    def snapshot(self):
        """[info or None] per replica (None while it is being restarted), and every replica's
        exits so far."""
        return {"current": list(self.current), "exits": [list(e) for e in self.exits]}

    def history(self):
        return list(self.events)
