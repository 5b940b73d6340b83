#include "trainer_sdk/broadcast_trainer_engine.hpp"

#include <ATen/ops/empty.h>

#include <algorithm>
#include <future>

#include "protocol/chunk_plan.hpp"
#include "trainer_sdk/async_call.hpp"
#include "trainer_sdk/rank_holdings.hpp"
#include "transport/byte_copy.hpp"
#include "transport/exception_text.hpp"
#include "transport/gloo_communicator.hpp"
#include "transport/rendezvous_store.hpp"
#include "transport/torch_dtype.hpp"

namespace hotswap::trainer_sdk {

protocol::NcclInitInfo BroadcastTransferParams::worker_init_info(int broadcasters) const {
  protocol::NcclInitInfo info;
  info.master_address = master_address;
  info.master_port = master_port;
  info.rank_offset = broadcasters;
  info.world_size = world_size;
  info.packing = protocol::PackingParams{packed, packed_buffer_size_bytes, packed_num_buffers};
  return info;
}

void pack_slice(at::Tensor& chunk, const protocol::ChunkSlice& slice, const at::Tensor& tensor) {
  if (slice.size == 0) return;
  transport::copy_tensor(chunk.narrow(0, static_cast<std::int64_t>(slice.offset),
                                      static_cast<std::int64_t>(slice.size)),
                         tensor.contiguous().view({-1}).view(at::kByte));
}

BroadcastTrainerEngine::BroadcastTrainerEngine(std::shared_ptr<WeightSyncClient> client,
                                               std::shared_ptr<WeightSource> source,
                                               const BroadcastTransferParams& params, int rank,
                                               SenderGroup group)
    : TrainerWeightTransferEngine(std::move(client), std::move(source), rank == 0),
      info_(params),
      rank_(rank),
      group_(group) {}

template <class Engine>
std::unique_ptr<Engine> BroadcastTrainerEngine::open(const TrainerInitInfo& info,
                                                     const BroadcastTransferParams& params,
                                                     SenderGroup group,
                                                     std::shared_ptr<WeightSyncClient> client,
                                                     std::shared_ptr<WeightSource> source) {
  if (!source) {
    throw protocol::ValueError(
        std::string(group.kind == SenderGroup::Kind::kGloo ? "Gloo" : "NCCL") +
        " trainer weight transfer requires a WeightSource.");
  }
  if (params.trainer_ranks < 1) {
    throw protocol::ValueError("trainer_ranks must be at least 1, got " +
                               std::to_string(params.trainer_ranks));
  }
  // Who joins the group, identically on every rank: with owners in the metadata, rank 0 and
  // each first owner (vLLM 0.34, ownership errors raised here, before any collective); with
  // held_names() on several ranks (vLLM 0.33's way), every trainer rank; else rank 0 alone.
  auto metadata = source->metadata();
  for (auto& m : metadata)
    protocol::check_ownership(m);
  const bool owned = std::any_of(metadata.begin(), metadata.end(),
                                 [](const protocol::ParamMeta& m) { return m.owners.has_value(); });
  std::vector<std::int64_t> members{0};
  std::optional<protocol::BroadcasterPlan> plan;
  if (owned) {
    plan = protocol::plan_broadcasters(metadata);
    members = plan->group_ranks;
  } else if (params.trainer_ranks > 1) {
    members.clear();
    for (int r = 0; r < params.trainer_ranks; ++r)
      members.push_back(r);
  }
  const auto broadcasters = static_cast<int>(members.size());
  if (params.world_size <= broadcasters) {
    throw protocol::ValueError("world_size " + std::to_string(params.world_size) +
                               " leaves no inference workers after the " +
                               std::to_string(broadcasters) + " broadcasting trainer ranks.");
  }
  if (owned && members.back() >= params.trainer_ranks) {
    throw protocol::ValueError("trainer rank " + std::to_string(members.back()) +
                               " broadcasts parameters (it is their first owner), but only " +
                               std::to_string(params.trainer_ranks) +
                               " trainer rank(s) take part (trainer_ranks)");
  }
  if (broadcasters > 1 && group.nccl_unique_id) {
    throw protocol::ValueError(
        "several sending trainer ranks meet through rank 0's TCPStore (master_address, "
        "master_port); NCCL's unique-id rendezvous has none: turn use_unique_id off");
  }
  if (params.trainer_ranks > 1 && (info.rank < 0 || info.rank >= params.trainer_ranks)) {
    throw protocol::ValueError("trainer rank " + std::to_string(info.rank) +
                               " is outside trainer_ranks " + std::to_string(params.trainer_ranks));
  }
  auto engine = std::make_unique<Engine>(client, source, params, info.rank, group);
  engine->members_ = members;
  const auto place = std::find(members.begin(), members.end(), info.rank);
  // Ranks that broadcast nothing stay out of the group: they only iterate their source.
  if (place == members.end()) return engine;
  engine->group_rank_ = static_cast<int>(place - members.begin());
  const auto worker_init = params.worker_init_info(broadcasters);
  engine->communicator_ =
      engine->is_sender()
          ? open_group_as_sender(client, worker_init, group, params.timeout)
          : open_group_as_member(worker_init, *engine->group_rank_, group, params.timeout);
  if (broadcasters == 1) return engine;
  engine->agree_on_senders(metadata, plan);
  return engine;
}

std::unique_ptr<BroadcastTrainerEngine> BroadcastTrainerEngine::trainer_init(
    const GlooTrainerInitInfo& info, std::shared_ptr<WeightSyncClient> client,
    std::shared_ptr<WeightSource> source) {
  return open<BroadcastTrainerEngine>(info, info, SenderGroup{}, std::move(client),
                                      std::move(source));
}

std::unique_ptr<NcclTrainerEngine> NcclTrainerEngine::trainer_init(
    const NcclTrainerInitInfo& info, std::shared_ptr<WeightSyncClient> client,
    std::shared_ptr<WeightSource> source) {
  SenderGroup group{SenderGroup::Kind::kNccl, info.device, info.use_unique_id};
  return open<NcclTrainerEngine>(info, info, group, std::move(client), std::move(source));
}

void BroadcastTrainerEngine::send_weights() {
  WeightSource& src = *source();
  auto meta = src.metadata();  // every rank: it may be a collective
  for (auto& m : meta)
    protocol::check_ownership(m);
  if (!group_rank_) {
    iterate_without_sending();
    return;
  }
  if (!communicator_) {
    throw protocol::RuntimeError("the transfer group is closed; call trainer_init again");
  }
  if (many_senders()) {
    ++round_;
    if (meta != layout_) {
      fail_round("metadata() on trainer rank " + std::to_string(rank_) +
                 " changed since trainer_init");
      throw protocol::ValueError(
          "metadata() on trainer rank " + std::to_string(rank_) +
          " changed since trainer_init, where the ranks agreed who sends what; call trainer_init "
          "again on every rank");
    }
    if (is_sender()) {
      send_as_rank_zero(meta);
    } else {
      send_as_other_rank();
    }
    return;
  }
  // The group was sized at trainer_init for rank 0 alone: owners that now name another
  // broadcaster need a group with it.
  if (protocol::plan_broadcasters(meta).group_ranks.size() > 1) {
    throw protocol::ValueError(
        "metadata() now names broadcasters other than rank 0 (ParamMeta owners), but the group "
        "formed at trainer_init has rank 0 alone; call trainer_init again on every rank");
  }
  drive_round(meta);
}

std::vector<BroadcastTrainerEngine::BroadcastCall> BroadcastTrainerEngine::calls_for(
    const std::vector<protocol::ParamMeta>& meta) const {
  if (!many_senders()) {
    BroadcastCall all;
    for (std::size_t i = 0; i < meta.size(); ++i)
      all.indices.push_back(i);
    return {all};
  }
  // vLLM 0.34: one update_weights per broadcaster, in ascending order, each with its own
  // parameters in metadata order.
  std::vector<BroadcastCall> calls(members_.size());
  for (std::size_t g = 0; g < calls.size(); ++g)
    calls[g].src = static_cast<std::int64_t>(g);
  for (std::size_t i = 0; i < meta.size(); ++i)
    calls[static_cast<std::size_t>(senders_[i])].indices.push_back(i);
  std::erase_if(calls, [](const BroadcastCall& c) { return c.indices.empty(); });
  return calls;
}

void BroadcastTrainerEngine::drive_round(const std::vector<protocol::ParamMeta>& meta) {
  run_round(round_version(), [&] { send_calls(meta); });
}

void BroadcastTrainerEngine::send_calls(const std::vector<protocol::ParamMeta>& meta) {
  // The other trainer ranks wait for this before their first collective, so that a slow start
  // (generation draining) does not count against their broadcast timeout.
  if (many_senders()) communicator_->store()->set(round_key("started"), "1");
  CheckedStream stream(source()->iter(), meta, group_.tensor_device(), share_);
  auto shared_client = client_shared();
  for (const auto& call : calls_for(meta)) {
    nlohmann::json update_info = nlohmann::json::object();
    std::vector<protocol::ParamMeta> subset;
    for (auto i : call.indices)
      subset.push_back(meta[i]);
    protocol::write_param_lists(subset, update_info);
    if (call.src != 0) update_info["src"] = call.src;  // 0: vLLM 0.33's payload exactly
    AsyncCall update([shared_client, update_info] { shared_client->update_weights(update_info); });
    // A request the worker rejected before any collective must not leave us blocked in one.
    update.rethrow_if_failed();
    try {
      transmit(stream, meta, call);
    } catch (...) {
      // Never wait for the update call here: the worker is blocked in the matching collective.
      // With many senders, a peer that failed first broke the group: its account is the cause
      // (and send_as_rank_zero tears the group down, after telling the other ranks).
      if (many_senders()) {
        if (auto cause = peer_failure()) throw protocol::TransferError(*cause);
        throw;
      }
      communicator_->abort();
      communicator_.reset();
      throw;
    }
    update.wait(info_.timeout, "update_weights");
  }
  // This pass (its source must end with the metadata) and every other rank's must have ended
  // cleanly before the workers commit. If one did not, every byte has landed and the workers
  // hold a session that will never finish: end it (best effort; hotswap's `abort_update`, since
  // a worker refuses to release its trainer mid-update, as vLLM 0.34 does), so that they report
  // idle on their old weights and an in-place worker generates again.
  try {
    stream.finish();
    if (many_senders()) await_other_ranks();
  } catch (...) {
    if (!many_senders()) {
      communicator_->abort();
      communicator_.reset();
    }
    try {
      client().abort_and_shutdown_weight_transfer_engine();
    } catch (const std::exception&) {
    }
    throw;
  }
}

std::string BroadcastTrainerEngine::round_key(const std::string& what) const {
  return "hotswap/round/" + std::to_string(round_) + "/" + what;
}

nlohmann::json BroadcastTrainerEngine::wire_settings() const {
  return {{"world_size", info_.world_size},
          {"trainer_ranks", info_.trainer_ranks},
          {"members", members_},
          {"packed", info_.packed},
          {"packed_buffer_size_bytes", info_.packed_buffer_size_bytes}};
}

void BroadcastTrainerEngine::agree_on_senders(
    std::vector<protocol::ParamMeta> metadata,
    const std::optional<protocol::BroadcasterPlan>& plan) {
  transport::RendezvousStore* store = communicator_->store();
  const std::string verdict_key = "hotswap/senders";
  const auto ack_timeout =
      std::min<std::chrono::milliseconds>(info_.timeout, std::chrono::seconds(10));
  auto holdings_key = [](int rank) { return "hotswap/holdings/" + std::to_string(rank); };
  // Rank r > 0: the verdict, acknowledged so that rank 0 may drop its store once all have read.
  auto read_verdict = [&](std::chrono::milliseconds timeout) {
    auto verdict = nlohmann::json::parse(store->get(verdict_key, timeout));
    store->set(verdict_key + "/read/" + std::to_string(*group_rank_), "1");
    return verdict;
  };
  try {
    if (store == nullptr) {
      throw protocol::RuntimeError("several sending trainer ranks need the group's TCPStore");
    }
    WeightSource& src = *source();
    RankHoldings mine;
    try {
      // trainer_init's reading: metadata() may be a collective, which ranks outside the group
      // would not join a second time.
      mine.metadata = std::move(metadata);
      if (auto held = src.held_names()) mine.held.emplace(held->begin(), held->end());
    } catch (const std::exception& e) {
      // Say so, so that rank 0 refuses the group at once instead of waiting out its timeout.
      store->set(holdings_key(*group_rank_),
                 nlohmann::json{{"error", transport::one_line_cause(e)}}.dump());
      if (!is_sender()) {
        try {
          read_verdict(ack_timeout);  // lets rank 0 drop its store; our own error is the one
        } catch (const std::exception&) {
        }
      }
      throw;
    }
    store->set(holdings_key(*group_rank_),
               nlohmann::json{{"holdings", mine.to_json()}, {"wire", wire_settings()}}.dump());
    if (is_sender()) {
      try {
        std::vector<RankHoldings> all{mine};
        for (std::size_t g = 1; g < members_.size(); ++g) {
          auto posted = nlohmann::json::parse(store->get(holdings_key(static_cast<int>(g))));
          const std::string who = "trainer rank " + std::to_string(members_[g]);
          if (posted.contains("error")) {
            throw protocol::ValueError(
                who + " could not declare its holdings: " + posted["error"].get<std::string>());
          }
          if (posted.at("wire") != wire_settings()) {
            throw protocol::ValueError(who + "'s transfer settings " + posted["wire"].dump() +
                                       " differ from rank 0's " + wire_settings().dump() +
                                       "; every rank must cut the stream alike");
          }
          all.push_back(RankHoldings::from_json(posted.at("holdings")));
        }
        // Owners name the broadcasters (vLLM 0.34); else each name's lowest holder does.
        senders_ = plan ? plan->src : assign_senders(all);
      } catch (const std::exception& e) {
        store->set(verdict_key, nlohmann::json{{"error", transport::one_line_cause(e)}}.dump());
        // Keep the store up until every rank has read why, so all of them raise the same error.
        for (std::size_t g = 1; g < members_.size(); ++g) {
          try {
            store->get(verdict_key + "/read/" + std::to_string(g), ack_timeout);
          } catch (const protocol::Error&) {
          }
        }
        if (dynamic_cast<const protocol::Error*>(&e) != nullptr) throw;
        throw protocol::ValueError(transport::one_line_cause(e));  // a malformed post
      }
      store->set(verdict_key, nlohmann::json{{"senders", senders_}}.dump());
    } else {
      auto verdict = read_verdict(info_.timeout);
      if (verdict.contains("error")) {
        throw protocol::ValueError(verdict["error"].get<std::string>());
      }
      senders_ = verdict.at("senders").get<std::vector<std::int64_t>>();
    }
    layout_ = std::move(mine.metadata);
    if (plan) {
      // vLLM 0.34's source yields exactly what this rank owns, which the ownership rules make
      // its own broadcasts: it visits what it sends.
      std::vector<bool> sends(layout_.size());
      for (std::size_t i = 0; i < sends.size(); ++i)
        sends[i] = senders_[i] == *group_rank_;
      share_ = RankShare{*group_rank_, sends, sends};
    } else {
      share_ = RankShare::of(*group_rank_, layout_, senders_, src.groups());
    }
  } catch (...) {
    communicator_->abort();
    communicator_.reset();
    throw;
  }
}

void BroadcastTrainerEngine::fail_round(const std::string& cause) {
  if (!communicator_) return;
  if (auto* store = communicator_->store()) {
    try {
      store->set(
          is_sender() ? round_key("outcome") : round_key("rank/" + std::to_string(*group_rank_)),
          "failed: " + cause);
    } catch (const protocol::Error&) {
      // The store went with rank 0: the peers learn of the failure from the broken group.
    }
  }
  communicator_->abort();
  communicator_.reset();
}

std::optional<std::string> BroadcastTrainerEngine::peer_failure() const {
  auto* store = communicator_ ? communicator_->store() : nullptr;
  if (store == nullptr) return std::nullopt;
  for (std::size_t g = 1; g < members_.size(); ++g) {
    auto said = store->try_get(round_key("rank/" + std::to_string(g)));
    if (said && said->starts_with("failed: ")) {
      return "trainer rank " + std::to_string(members_[g]) + " failed round " +
             std::to_string(round_) + ": " + said->substr(8);
    }
  }
  return std::nullopt;
}

void BroadcastTrainerEngine::await_other_ranks() {
  for (std::size_t g = 1; g < members_.size(); ++g) {
    const std::string said = communicator_->store()->get(round_key("rank/" + std::to_string(g)));
    if (said != "sent") {
      throw protocol::TransferError("trainer rank " + std::to_string(members_[g]) +
                                    " failed round " + std::to_string(round_) + ": " +
                                    said.substr(8));
    }
  }
}

void BroadcastTrainerEngine::send_as_rank_zero(const std::vector<protocol::ParamMeta>& meta) {
  try {
    drive_round(meta);
  } catch (const std::exception& e) {
    fail_round(transport::one_line_cause(e));
    throw;
  }
  // The round is committed. Keep the store (which this rank hosts) up until every rank has read
  // so, or a shutdown right after this would make them fail a round that succeeded.
  auto* store = communicator_->store();
  store->set(round_key("outcome"), "ok");
  for (std::size_t g = 1; g < members_.size(); ++g) {
    try {
      store->get(round_key("outcome/read/" + std::to_string(g)));
    } catch (const protocol::Error& e) {
      fail_round(e.what());
      throw protocol::TransferError("round " + std::to_string(round_) +
                                    " committed, but trainer rank " + std::to_string(members_[g]) +
                                    " never read so; the group is closed: " + e.what());
    }
  }
}

void BroadcastTrainerEngine::send_as_other_rank() {
  auto* store = communicator_->store();
  try {
    // Rank 0's update_weights may wait behind start_weight_update for generation to drain.
    store->get(round_key("started"), 2 * info_.timeout);
    CheckedStream stream(source()->iter(), layout_, group_.tensor_device(), share_);
    for (const auto& call : calls_for(layout_))
      transmit(stream, layout_, call);
    stream.finish();
  } catch (const std::exception& e) {
    fail_round(transport::one_line_cause(e));
    throw;
  }
  // Return once the round is committed (or not): rank 0 says which. It may first wait up to a
  // timeout for update_weights and another for finish_weight_update.
  std::string outcome;
  try {
    // Each update_weights call waits up to a timeout; finish_weight_update another.
    const auto calls = static_cast<int>(calls_for(layout_).size());
    store->set(round_key("rank/" + std::to_string(*group_rank_)), "sent");
    outcome = store->get(round_key("outcome"), (calls + 2) * info_.timeout);
    store->set(round_key("outcome/read/" + std::to_string(*group_rank_)), "1");
  } catch (const std::exception&) {
    communicator_->abort();
    communicator_.reset();
    throw;
  }
  if (outcome != "ok") {
    communicator_->abort();
    communicator_.reset();
    throw protocol::RuntimeError("trainer rank 0 failed round " + std::to_string(round_) + ": " +
                                 outcome.substr(8));
  }
}

at::Tensor BroadcastTrainerEngine::scratch(const protocol::ParamMeta& meta) {
  const auto n = static_cast<std::int64_t>(meta.nbytes());
  if (!scratch_.defined() || scratch_.numel() < n) {
    scratch_ = at::empty({n}, at::TensorOptions().dtype(at::kByte).device(group_.tensor_device()));
  }
  // Typed as the root's tensor: NCCL needs the same count and datatype on every rank.
  return scratch_.narrow(0, 0, n).view(transport::to_scalar_type(meta.dtype));
}

void BroadcastTrainerEngine::transmit(CheckedStream& stream,
                                      const std::vector<protocol::ParamMeta>& meta,
                                      const BroadcastCall& call) {
  // The call's root takes its parameters from the source; every other member receives them
  // into scratch and drops them.
  const int root = static_cast<int>(call.src);
  const bool mine = root == *group_rank_;
  if (!info_.packed) {
    for (auto i : call.indices) {
      at::Tensor t = mine ? stream.take(i) : scratch(meta[i]);
      communicator_->broadcast(t, root, info_.timeout);
      reach_mid_update();
    }
    return;
  }
  std::vector<protocol::ParamMeta> subset;
  subset.reserve(call.indices.size());
  for (auto i : call.indices)
    subset.push_back(meta[i]);
  auto plan = protocol::plan_nccl_chunks(
      subset, static_cast<std::uint64_t>(info_.packed_buffer_size_bytes));
  if (plan.empty()) return;
  // On the CPU the packing of chunk k+1 (taking its tensors from the source and copying them in)
  // runs on a helper thread while chunk k is on the wire, in the other of two buffers kept
  // across rounds; serially, every chunk's copy stalled the broadcast. The source is still
  // walked in order and one tensor at a time, by one thread at a time. On a GPU the copies are
  // queued on the device and overlap by themselves.
  const bool overlap = group_.tensor_device().is_cpu() && info_.packed_num_buffers > 1;
  pack_buffers_.resize(overlap ? 2 : 1);
  auto fill = [&stream, &call, mine](const protocol::Chunk& chunk, at::Tensor send) {
    if (!mine) return;
    for (const auto& slice : chunk.slices)
      pack_slice(send, slice, stream.take(call.indices[slice.param_index]));
  };
  auto buffer_for = [&](std::size_t c) {
    const auto bytes = static_cast<std::int64_t>(plan[c].size_bytes);
    at::Tensor& buffer = pack_buffers_[c % pack_buffers_.size()];
    if (!buffer.defined() || buffer.numel() < bytes) {
      buffer = at::empty({std::max<std::int64_t>(bytes, info_.packed_buffer_size_bytes)},
                         at::TensorOptions().dtype(at::kByte).device(group_.tensor_device()));
    }
    return buffer.narrow(0, 0, bytes);
  };
  std::future<void> packing;  // the next chunk's, on its helper thread; joined on every exit
  at::Tensor send = buffer_for(0);
  fill(plan.front(), send);
  for (std::size_t c = 0; c < plan.size(); ++c) {
    at::Tensor next;
    if (c + 1 < plan.size()) {
      next = buffer_for(c + 1);
      if (overlap) {
        packing = std::async(std::launch::async, fill, std::cref(plan[c + 1]), next);
      }
    }
    communicator_->broadcast(send, root, info_.timeout);
    reach_mid_update();
    if (c + 1 < plan.size()) {
      if (overlap) {
        packing.get();  // rethrows the source's error, before chunk c+1 goes out
      } else {
        fill(plan[c + 1], next);
      }
    }
    send = next;
  }
}

void BroadcastTrainerEngine::shutdown() {
  if (communicator_) communicator_->abort();
  communicator_.reset();
}

}  // namespace hotswap::trainer_sdk
