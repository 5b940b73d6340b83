// POST /generate (hotswap's, and vLLM's `generate` over ZeroMQ): token ids in, token ids out,
// with each output token's weight version. A GenerateRun is the request in the scheduler: it
// holds no caller's thread, and answers when the scheduler ends it.
#include <atomic>
#include <mutex>

#include "protocol/control_methods.hpp"
#include "protocol/method_params.hpp"
#include "worker/routes/route_table.hpp"
#include "worker/routes/serving_context.hpp"

namespace hotswap::worker {
namespace {

class GenerateRun : public PendingAnswer {
 public:
  GenerateRun(GenerationScheduler& scheduler, bool logprobs, bool versions)
      : scheduler_(scheduler), logprobs_(logprobs), versions_(versions) {}

  void submit(GenerateRequest request, GenerationScheduler::Clock::time_point deadline,
              const std::shared_ptr<GenerateRun>& self) {
    const auto ticket = scheduler_.submit(std::move(request), deadline,
                                          [self](GenerateOutcome outcome) { self->end(outcome); });
    std::lock_guard lock(mutex_);
    ticket_ = ticket;
  }

  void when_done(std::function<void()> done) override {
    {
      std::lock_guard lock(mutex_);
      if (!ended_) {
        done_ = std::move(done);
        return;
      }
    }
    done();
  }

  nlohmann::ordered_json response() const override {
    std::lock_guard lock(mutex_);
    if (error_) std::rethrow_exception(error_);
    return result_;
  }

  bool quick_response() const override { return true; }  // made in end()

  void cancel() override {
    std::uint64_t ticket = 0;
    {
      std::lock_guard lock(mutex_);
      ticket = ticket_;
    }
    // Not under mutex_: the scheduler calls end() with its own lock held.
    if (ticket != 0) scheduler_.cancel(ticket);
  }

 private:
  // The scheduler's callback (its lock held): the result is a few fields, made here.
  void end(const GenerateOutcome& outcome) {
    std::function<void()> done;
    {
      std::lock_guard lock(mutex_);
      if (outcome.error) {
        error_ = outcome.error;
      } else {
        result_ = outcome.result->to_json(logprobs_, versions_);
      }
      ended_ = true;
      done = std::move(done_);
    }
    if (done) done();
  }

  GenerationScheduler& scheduler_;
  const bool logprobs_;
  const bool versions_;
  mutable std::mutex mutex_;
  std::uint64_t ticket_ = 0;
  bool ended_ = false;
  nlohmann::ordered_json result_;
  std::exception_ptr error_;
  std::function<void()> done_;
};

}  // namespace

void add_generate_route(RouteTable& table, const ServingContext& context) {
  // For requests that name no id: abort_requests with no ids ends them too.
  auto unnamed = std::make_shared<std::atomic<std::uint64_t>>(0);
  table.add<protocol::GenerateParams>(
      protocol::methods::kGenerate,
      [](const RouteCall& call) { return protocol::GenerateParams::from_json(call.params); },
      [&context, unnamed](protocol::GenerateParams p, const RouteCall&) {
        fit_to_context(context.config.max_position_embeddings,
                       static_cast<std::int64_t>(p.prompt_token_ids.size()), p.max_tokens);
        GenerateRequest request;
        request.prompt_token_ids = std::move(p.prompt_token_ids);
        static_cast<protocol::SamplingFields&>(request.params) = p;  // as read and validated
        request.params.max_tokens = p.max_tokens;
        request.params.stop_token_ids = std::move(p.stop_token_ids);
        request.logprobs = p.logprobs;
        request.request_id = p.request_id.value_or("generate-" + std::to_string(++*unnamed));
        // A LoRA adapter by its name, as completions take one (a 404 for a name not served).
        request.lora = context.completions.resolve_model(p.model);
        if (request.lora != nullptr) request.lora_name = *p.model;
        auto run =
            std::make_shared<GenerateRun>(context.scheduler, p.logprobs, p.return_weight_versions);
        // A worker paused in keep mode holds requests until resume(); the wait is bounded all
        // the same.
        run->submit(std::move(request), GenerationScheduler::Clock::now() + context.timeout, run);
        return RouteAnswer::later(std::move(run));
      });
}

}  // namespace hotswap::worker
