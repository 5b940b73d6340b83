// JinjaRenderer: chat templates rendered by Jinja2 itself, in a CPython interpreter embedded in
// the worker (Debian's libpython and python3-jinja2), with the environment transformers'
// apply_chat_template renders them in: a sandboxed immutable environment with trim_blocks and
// lstrip_blocks, the loop-controls extension and `{% generation %}` blocks, `raise_exception`
// and `strftime_now` globals, a `tojson` filter that keeps non-ASCII characters, and the
// restricted `dict` and `namespace` transformers gives templates. Templates are outside input
// (a model's tokenizer_config.json, a request's `chat_template`): a render is bounded in time,
// in output and in memory, and `*`, `**` and `+` cannot build a value past the output bound.
//
// The interpreter starts on first use, isolated from the environment's PYTHON* variables and
// without signal handlers, and renders nothing but templates: no other Python runs in the
// worker. Renders are serialized (one lock, and the interpreter's own); each compiled template
// is kept, up to a few.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>

#include <nlohmann/json.hpp>

namespace hotswap::worker {

struct RenderLimits {
  std::chrono::milliseconds time{5000};  // the render's own time, from its first statement
  std::size_t max_chars = 4 << 20;       // of the rendered text (and of a `*` product in it)
  std::size_t max_template_bytes = 1 << 20;
  // Of the interpreter's memory one render may take (PythonMemoryBudget), beyond four times the
  // size of its variables as JSON (a template may copy what it reads: `messages|tojson`).
  std::size_t max_memory_bytes = std::size_t{256} << 20;
};

class JinjaRenderer {
 public:
  // The process's renderer (one interpreter per process); starts it on first use. Throws
  // protocol::RuntimeError naming what is missing when Python or Jinja2 cannot be loaded.
  static JinjaRenderer& instance();

  // `source` rendered with `variables` (a JSON object: each member a template variable, its
  // members in the order given, which `tojson` keeps as transformers does). A template that does
  // not compile, raises (raise_exception, an undefined operation, the sandbox), or passes a
  // limit throws protocol::ValueError with Jinja2's message.
  std::string render(const std::string& source, const nlohmann::ordered_json& variables,
                     const RenderLimits& limits = {});

  // Whether `source` loops over a message's content (`{% for part in message['content'] %}`),
  // and so takes it as a list of parts rather than text: vLLM's "auto" content format. A
  // template that does not parse takes text.
  bool iterates_over_content(const std::string& source, const RenderLimits& limits = {});

  // The Jinja2 the renderer runs, e.g. "3.1.2".
  std::string jinja_version();

  JinjaRenderer(const JinjaRenderer&) = delete;
  JinjaRenderer& operator=(const JinjaRenderer&) = delete;

 private:
  JinjaRenderer();
  ~JinjaRenderer() = default;  // never finalized: the interpreter lives as long as the process
};

}  // namespace hotswap::worker
