#include "trainer_sdk/broadcast_trainer_engine.hpp"

#include <ATen/ops/empty.h>

#include <future>

#include "protocol/chunk_plan.hpp"
#include "protocol/sender_ranks.hpp"
#include "trainer_sdk/async_call.hpp"
#include "trainer_sdk/rank_holdings.hpp"
#include "trainer_sdk/round_hook.hpp"
#include "transport/byte_copy.hpp"
#include "transport/exception_text.hpp"
#include "transport/gloo_communicator.hpp"
#include "transport/rendezvous_store.hpp"
#include "transport/torch_dtype.hpp"

namespace hotswap::trainer_sdk {

protocol::NcclInitInfo BroadcastTransferParams::worker_init_info() const {
  protocol::NcclInitInfo info;
  info.master_address = master_address;
  info.master_port = master_port;
  info.rank_offset = trainer_ranks;
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
  if (params.world_size < params.trainer_ranks + 1) {
    throw protocol::ValueError("world_size must count the " + std::to_string(params.trainer_ranks) +
                               " trainer rank(s) and at least one worker, got " +
                               std::to_string(params.world_size));
  }
  if (params.trainer_ranks > 1 && group.nccl_unique_id) {
    throw protocol::ValueError(
        "several sending trainer ranks meet through rank 0's TCPStore (master_address, "
        "master_port); NCCL's unique-id rendezvous has none: turn use_unique_id off");
  }
  if (params.trainer_ranks > 1 && (info.rank < 0 || info.rank >= params.trainer_ranks)) {
    throw protocol::ValueError("trainer rank " + std::to_string(info.rank) +
                               " is outside trainer_ranks " + std::to_string(params.trainer_ranks));
  }
  auto engine = std::make_unique<Engine>(client, source, params, info.rank, group);
  if (params.trainer_ranks == 1) {
    if (!engine->is_sender()) return engine;  // only rank 0 joins the transfer group
    engine->communicator_ =
        open_group_as_sender(client, params.worker_init_info(), group, params.timeout);
    return engine;
  }
  engine->communicator_ =
      engine->is_sender()
          ? open_group_as_sender(client, params.worker_init_info(), group, params.timeout)
          : open_group_as_member(params.worker_init_info(), info.rank, group, params.timeout);
  engine->agree_on_senders();
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
  if (!many_senders() && !is_sender()) {
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
  drive_round(meta);
}

void BroadcastTrainerEngine::drive_round(const std::vector<protocol::ParamMeta>& meta) {
  nlohmann::json update_info = nlohmann::json::object();
  protocol::write_param_lists(meta, update_info);
  if (many_senders()) protocol::write_sender_ranks(senders_, update_info);
  client().start_weight_update();
  reach(RoundPoint::kStarted);
  auto shared_client = client_shared();
  AsyncCall update([shared_client, update_info] { shared_client->update_weights(update_info); });
  // A request the worker rejected before any collective must not leave us blocked in one.
  update.rethrow_if_failed();
  // The other trainer ranks wait for this before their first collective, so that a slow start
  // (generation draining) does not count against their broadcast timeout.
  if (many_senders()) communicator_->store()->set(round_key("started"), "1");
  try {
    transmit(meta);
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
  // Every rank's pass must have ended cleanly (its source ended with the metadata, too) before
  // the workers commit. If one did not, the workers hold a session that will never finish: end
  // it (best effort; a new init would too), so that they report idle on their old weights.
  if (many_senders()) {
    try {
      await_other_ranks();
    } catch (...) {
      try {
        client().shutdown_weight_transfer_engine();
      } catch (const std::exception&) {
      }
      throw;
    }
  }
  reach(RoundPoint::kBeforeFinish);
  client().finish_weight_update(round_version());
}

std::string BroadcastTrainerEngine::round_key(const std::string& what) const {
  return "hotswap/round/" + std::to_string(round_) + "/" + what;
}

nlohmann::json BroadcastTrainerEngine::wire_settings() const {
  return {{"world_size", info_.world_size},
          {"trainer_ranks", info_.trainer_ranks},
          {"packed", info_.packed},
          {"packed_buffer_size_bytes", info_.packed_buffer_size_bytes}};
}

void BroadcastTrainerEngine::agree_on_senders() {
  transport::RendezvousStore* store = communicator_->store();
  const std::string verdict_key = "hotswap/senders";
  const auto ack_timeout =
      std::min<std::chrono::milliseconds>(info_.timeout, std::chrono::seconds(10));
  auto holdings_key = [](int rank) { return "hotswap/holdings/" + std::to_string(rank); };
  // Rank r > 0: the verdict, acknowledged so that rank 0 may drop its store once all have read.
  auto read_verdict = [&](std::chrono::milliseconds timeout) {
    auto verdict = nlohmann::json::parse(store->get(verdict_key, timeout));
    store->set(verdict_key + "/read/" + std::to_string(rank_), "1");
    return verdict;
  };
  try {
    if (store == nullptr) {
      throw protocol::RuntimeError("several sending trainer ranks need the group's TCPStore");
    }
    WeightSource& src = *source();
    RankHoldings mine;
    try {
      mine.metadata = src.metadata();
      if (auto held = src.held_names()) mine.held.emplace(held->begin(), held->end());
    } catch (const std::exception& e) {
      // Say so, so that rank 0 refuses the group at once instead of waiting out its timeout.
      store->set(holdings_key(rank_),
                 nlohmann::json{{"error", transport::one_line_cause(e)}}.dump());
      if (!is_sender()) {
        try {
          read_verdict(ack_timeout);  // lets rank 0 drop its store; our own error is the one
        } catch (const std::exception&) {
        }
      }
      throw;
    }
    store->set(holdings_key(rank_),
               nlohmann::json{{"holdings", mine.to_json()}, {"wire", wire_settings()}}.dump());
    if (is_sender()) {
      try {
        std::vector<RankHoldings> all{mine};
        for (int r = 1; r < info_.trainer_ranks; ++r) {
          auto posted = nlohmann::json::parse(store->get(holdings_key(r)));
          const std::string who = "trainer rank " + std::to_string(r);
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
        senders_ = assign_senders(all);
      } catch (const std::exception& e) {
        store->set(verdict_key, nlohmann::json{{"error", transport::one_line_cause(e)}}.dump());
        // Keep the store up until every rank has read why, so all of them raise the same error.
        for (int r = 1; r < info_.trainer_ranks; ++r) {
          try {
            store->get(verdict_key + "/read/" + std::to_string(r), ack_timeout);
          } catch (const protocol::Error&) {
          }
        }
        if (dynamic_cast<const protocol::Error*>(&e) != nullptr) throw;
        throw protocol::ValueError(transport::one_line_cause(e));  // a malformed post
      }
      store->set(verdict_key, nlohmann::json{{"sender_ranks", senders_}}.dump());
    } else {
      auto verdict = read_verdict(info_.timeout);
      if (verdict.contains("error")) {
        throw protocol::ValueError(verdict["error"].get<std::string>());
      }
      senders_ = verdict.at("sender_ranks").get<std::vector<std::int64_t>>();
    }
    layout_ = std::move(mine.metadata);
    share_ = RankShare::of(rank_, layout_, senders_, src.groups());
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
      store->set(is_sender() ? round_key("outcome") : round_key("rank/" + std::to_string(rank_)),
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
  for (int r = 1; r < info_.trainer_ranks; ++r) {
    auto said = store->try_get(round_key("rank/" + std::to_string(r)));
    if (said && said->starts_with("failed: ")) {
      return "trainer rank " + std::to_string(r) + " failed round " + std::to_string(round_) +
             ": " + said->substr(8);
    }
  }
  return std::nullopt;
}

void BroadcastTrainerEngine::await_other_ranks() {
  for (int r = 1; r < info_.trainer_ranks; ++r) {
    const std::string said = communicator_->store()->get(round_key("rank/" + std::to_string(r)));
    if (said != "sent") {
      throw protocol::TransferError("trainer rank " + std::to_string(r) + " failed round " +
                                    std::to_string(round_) + ": " + said.substr(8));
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
  for (int r = 1; r < info_.trainer_ranks; ++r) {
    try {
      store->get(round_key("outcome/read/" + std::to_string(r)));
    } catch (const protocol::Error& e) {
      fail_round(e.what());
      throw protocol::TransferError("round " + std::to_string(round_) +
                                    " committed, but trainer rank " + std::to_string(r) +
                                    " never read so; the group is closed: " + e.what());
    }
  }
}

void BroadcastTrainerEngine::send_as_other_rank() {
  auto* store = communicator_->store();
  try {
    // Rank 0's update_weights may wait behind start_weight_update for generation to drain.
    store->get(round_key("started"), 2 * info_.timeout);
    transmit(layout_);
  } catch (const std::exception& e) {
    fail_round(transport::one_line_cause(e));
    throw;
  }
  // Return once the round is committed (or not): rank 0 says which. It may first wait up to a
  // timeout for update_weights and another for finish_weight_update.
  std::string outcome;
  try {
    store->set(round_key("rank/" + std::to_string(rank_)), "sent");
    outcome = store->get(round_key("outcome"), 3 * info_.timeout);
    store->set(round_key("outcome/read/" + std::to_string(rank_)), "1");
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

void BroadcastTrainerEngine::transmit(const std::vector<protocol::ParamMeta>& meta) {
  CheckedStream stream(source()->iter(), meta, group_.tensor_device(), share_);
  const std::vector<std::int64_t> all_from_rank_zero;
  const auto& senders = many_senders() ? senders_ : all_from_rank_zero;
  if (!info_.packed) {
    for (std::size_t i = 0; i < meta.size(); ++i) {
      const int root = static_cast<int>(protocol::sender_of(senders, i));
      at::Tensor t = stream.take(i);
      if (root != rank_) t = scratch(meta[i]);
      communicator_->broadcast(t, root, info_.timeout);
      if (i == 0 && is_sender()) reach(RoundPoint::kMidUpdate);
    }
    stream.finish();
    return;
  }
  auto plan = protocol::plan_nccl_chunks(
      meta, static_cast<std::uint64_t>(info_.packed_buffer_size_bytes), senders);
  // On the CPU the packing of chunk k+1 (taking its tensors from the source and copying them in)
  // runs on a helper thread while chunk k is on the wire, in the other of two buffers kept
  // across rounds; serially, every chunk's copy stalled the broadcast. The source is still
  // walked in order and one tensor at a time, by one thread at a time. On a GPU the copies are
  // queued on the device and overlap by themselves.
  const bool overlap = group_.tensor_device().is_cpu() && info_.packed_num_buffers > 1;
  pack_buffers_.resize(overlap ? 2 : 1);
  auto fill = [this, &stream](const protocol::Chunk& chunk, at::Tensor send) {
    const bool mine = chunk.sender_rank == rank_;
    for (const auto& slice : chunk.slices) {
      at::Tensor t = stream.take(slice.param_index);
      if (mine) pack_slice(send, slice, t);
    }
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
    communicator_->broadcast(send, static_cast<int>(plan[c].sender_rank), info_.timeout);
    if (c == 0 && is_sender()) reach(RoundPoint::kMidUpdate);
    if (c + 1 < plan.size()) {
      if (overlap) {
        packing.get();  // rethrows the source's error, before chunk c+1 goes out
      } else {
        fill(plan[c + 1], next);
      }
    }
    send = next;
  }
  stream.finish();
}

void BroadcastTrainerEngine::shutdown() {
  if (communicator_) communicator_->abort();
  communicator_.reset();
}

}  // namespace hotswap::trainer_sdk
