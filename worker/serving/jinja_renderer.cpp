#include "worker/serving/jinja_renderer.hpp"

// pybind11 first: it includes Python.h, which must come before any standard header.
#include <pybind11/eval.h>
#include <pybind11/pybind11.h>

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>

#include "protocol/errors.hpp"
#include "worker/serving/python_memory_budget.hpp"

namespace py = pybind11;

namespace hotswap::worker {
namespace {

// The Python side, run once in a namespace of its own. `render` is all the C++ side calls.
constexpr const char* kSetup = R"PY(
import datetime
import json

import jinja2
import jinja2.ext
import jinja2.nodes
import jinja2.utils
from jinja2.exceptions import SecurityError, TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment


class TemplateLimitError(TemplateError):
    """A render past its time or output bound."""


_bounds = {"chars": 0}


def _refuse_private(names):
    # transformers' rule for namespaces: a name starting with "_" would lead to CPython's
    # internals.
    for name in names:
        if isinstance(name, str) and name.startswith("_"):
            raise SecurityError(
                "Chat templates cannot store underscore-prefixed attributes on a namespace, "
                f"but got {name!r}. Please rename the attribute.")


class _Namespace(jinja2.utils.Namespace):
    def __init__(*args, **kwargs):  # jinja2's own signature: `self` may be a keyword too
        space, rest = args[0], args[1:]
        given = dict(*rest, **kwargs)
        _refuse_private(given)
        jinja2.utils.Namespace.__init__(space, given)

    def __setitem__(self, name, value):
        _refuse_private((name,))
        jinja2.utils.Namespace.__setitem__(self, name, value)


class _Dict:
    # `dict(...)` and `dict.fromkeys(...)` for templates, without the type itself (whose
    # attributes lead out of the sandbox).
    def __call__(self, *args, **kwargs):
        return dict(*args, **kwargs)

    def fromkeys(self, *args, **kwargs):
        return dict.fromkeys(*args, **kwargs)


class _Generation(jinja2.ext.Extension):
    # {% generation %}...{% endgeneration %}: transformers marks the assistant's part with it
    # for a mask this renderer does not compute. The body renders as a call block's does (its
    # assignments stay inside it), and comes out unchanged.
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

    def _body(self, caller):
        return caller()


class _Environment(ImmutableSandboxedEnvironment):
    # One expression of C code is not interrupted by the time bound: `*` and `**` are checked
    # before they run, against the output bound.
    intercepted_binops = frozenset(["*", "**", "+"])

    def call_binop(self, context, operator, left, right):
        limit = _bounds["chars"]
        if operator == "*":
            for sequence, times in ((left, right), (right, left)):
                if (isinstance(sequence, (str, list, tuple)) and isinstance(times, int)
                        and len(sequence) * times > limit):
                    raise TemplateLimitError(
                        f"the chat template's output is limited to {limit} characters, and a "
                        f"`*` in it would make {len(sequence) * times}")
        elif operator == "+":
            # Doubling a string or a list in a loop reaches gigabytes within the time bound.
            if (isinstance(left, (str, list, tuple)) and isinstance(right, (str, list, tuple))
                    and len(left) + len(right) > limit):
                raise TemplateLimitError(
                    f"the chat template's output is limited to {limit} characters, and a `+` in "
                    f"it would make {len(left) + len(right)}")
        elif operator == "**":
            if (isinstance(left, int) and isinstance(right, int) and abs(left) > 1
                    and right * max(1, abs(left).bit_length()) > 8 * limit):
                raise TemplateLimitError(
                    f"the chat template raises {left} to the power {right}, past its bounds")
        return super().call_binop(context, operator, left, right)


def _raise_exception(message):
    raise TemplateError(message)


def _tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    # Jinja2's own filter escapes HTML characters; templates expect plain JSON, non-ASCII kept.
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def _strftime_now(format):
    return datetime.datetime.now().strftime(format)


_environment = _Environment(trim_blocks=True, lstrip_blocks=True,
                            extensions=[_Generation, jinja2.ext.loopcontrols])
_environment.filters["tojson"] = _tojson
_environment.globals["raise_exception"] = _raise_exception
_environment.globals["strftime_now"] = _strftime_now
_environment.globals["dict"] = _Dict()
_environment.globals["namespace"] = _Namespace

_compiled = {}  # source -> template, the last few
_content_loops = {}  # source -> whether it loops over a message's content, the last few


class _UnusualLoop(Exception):
    """A loop over the messages or their content whose target is not one name."""


def _reads(node, name, key=None):
    # `name` (or `name[key]`, `name.key`), read as it is or through filters, tests and slices:
    # `messages|selectattr(...)`, `message['content'] is string`, `messages[1:]`.
    nodes = jinja2.nodes
    while True:
        if isinstance(node, nodes.Filter) and node.node is not None:
            node = node.node
        elif isinstance(node, nodes.Test):
            node = node.node
        elif isinstance(node, nodes.Getitem) and isinstance(node.arg, nodes.Slice):
            node = node.node
        else:
            break

    def is_name(n):
        return isinstance(n, nodes.Name) and n.ctx == "load" and n.name == name

    if key is None:
        return is_name(node)
    if isinstance(node, nodes.Getitem):
        return (is_name(node.node) and isinstance(node.arg, nodes.Const)
                and node.arg.value == key)
    return isinstance(node, nodes.Getattr) and is_name(node.node) and node.attr == key


def _loop_name(loop):
    if not isinstance(loop.target, jinja2.nodes.Name):
        raise _UnusualLoop()
    return loop.target.name


def _loops_over_content(tree):
    nodes = jinja2.nodes
    # `messages`, and every name set from it or from one of those (`{% set rest = messages[1:] %}`),
    # breadth first.
    conversations = ["messages"]
    pending = ["messages"]
    while pending:
        name = pending.pop(0)
        for assign in tree.find_all(nodes.Assign):
            if _reads(assign.node, name):
                if not isinstance(assign.target, nodes.Name):
                    raise _UnusualLoop()
                target = assign.target.name
                if target not in conversations:
                    conversations.append(target)
                    pending.append(target)
    loops = list(tree.find_all(nodes.For))
    messages = [_loop_name(loop) for loop in loops
                if any(_reads(loop.iter, name) for name in conversations)]
    # A loop over a message's content, or over a name `content`: the first one decides.
    for loop in loops:
        if (any(_reads(loop.iter, message, "content") for message in messages)
                or (isinstance(loop.iter, nodes.Name) and loop.iter.name == "content")):
            _loop_name(loop)
            return True
    return False


def iterates_over_content(source):
    # vLLM's "auto" content format, found in the template's syntax tree as vLLM finds it: a
    # template with a loop over a message's content takes the parts as a list; any other, or one
    # whose loops over the messages or their content do not bind one name, takes text.
    known = _content_loops.get(source)
    if known is not None:
        return known
    try:
        found = _loops_over_content(_environment.parse(source))
    except (TemplateError, _UnusualLoop):
        found = False
    if len(_content_loops) >= 8:
        _content_loops.pop(next(iter(_content_loops)))
    _content_loops[source] = found
    return found


def render(source, variables, max_chars):
    # Its time, memory and the template's size are bounded from outside: past its deadline, a
    # watchdog raises TemplateLimitError in this thread (CPython's asynchronous exception); past
    # its memory, an allocation fails (MemoryError).
    template = _compiled.get(source)
    if template is None:
        template = _environment.from_string(source)
        if len(_compiled) >= 8:
            _compiled.pop(next(iter(_compiled)))
        _compiled[source] = template
    _bounds["chars"] = max_chars
    pieces = []
    length = 0
    for piece in template.generate(variables):
        length += len(piece)
        if length > max_chars:
            raise TemplateLimitError(
                f"the chat template's output is limited to {max_chars} characters")
        pieces.append(piece)
    return "".join(pieces)
)PY";

// What the C++ side keeps of the interpreter. Never destroyed: the interpreter is never
// finalized, and Python objects must not be released without it.
struct Interpreter {
  py::object load_json;  // json.loads: a render's variables, read before its memory is counted
  py::object render;
  py::object iterates_over_content;
  PyObject* limit_error = nullptr;  // TemplateLimitError, the watchdog's exception
  std::string jinja_version;
};

Interpreter* start_interpreter() {
  // A malloc-based allocator with no debug hooks, named rather than left to the build's default:
  // PythonMemoryBudget reads the sizes of the blocks it counts back from malloc.
  PyPreConfig pre;
  PyPreConfig_InitIsolatedConfig(&pre);
#if defined(__SANITIZE_ADDRESS__)
  // Instrumented, the interpreter keeps its objects in malloc's memory rather than in its own
  // arenas (mapped memory, which leak checking does not read): what they hold on to (OpenSSL's
  // state behind hashlib, say) is then seen as held, not leaked.
  pre.allocator = PYMEM_ALLOCATOR_MALLOC;
#else
  pre.allocator = PYMEM_ALLOCATOR_PYMALLOC;
#endif
  if (PyStatus_Exception(Py_PreInitialize(&pre))) {
    throw protocol::RuntimeError(
        "cannot prepare the Python interpreter that renders chat templates");
  }
  PythonMemoryBudget::install();
  PyConfig config;
  // Isolated: PYTHONPATH, PYTHONHOME and the user's site directory (a virtual environment's,
  // say) do not reach it; Debian's site module still adds /usr/lib/python3/dist-packages, where
  // python3-jinja2 lives. No signal handlers: SIGINT stays the worker's.
  PyConfig_InitIsolatedConfig(&config);
  config.install_signal_handlers = 0;
  config.site_import = 1;
  config.write_bytecode = 0;
  const PyStatus status = Py_InitializeFromConfig(&config);
  PyConfig_Clear(&config);
  if (PyStatus_Exception(status)) {
    throw protocol::RuntimeError(
        std::string("cannot start the Python interpreter that renders chat templates: ") +
        (status.err_msg ? status.err_msg : "unknown error"));
  }
  auto* state = new Interpreter;
  try {
    py::dict space;
    space["__builtins__"] = py::module_::import("builtins");
    py::exec(kSetup, space);
    state->load_json = py::module_::import("json").attr("loads");
    state->render = space["render"];
    state->iterates_over_content = space["iterates_over_content"];
    state->limit_error = py::object(space["TemplateLimitError"]).release().ptr();
    state->jinja_version = py::str(py::module_::import("jinja2").attr("__version__"));
  } catch (const py::error_already_set& e) {
    const std::string why = e.what();
    (void)PyEval_SaveThread();  // the lock goes with the failure, never kept by this thread
    throw protocol::RuntimeError(
        "cannot set up Jinja2 to render chat templates (Debian's python3-jinja2): " + why);
  }
  // pybind11's own state, made here while this thread holds the interpreter's lock: made later
  // by the first thread to use pybind11, it freed that thread's state and then used it (ASan:
  // heap-use-after-free in gil_scoped_acquire, a worker crashed on its first chat requests).
  (void)py::detail::get_internals();
  // Other threads take the interpreter's lock from here on (Gil).
  (void)PyEval_SaveThread();
  return state;
}

// The interpreter's lock for the calling thread, whichever thread it is (CPython's own
// PyGILState API: a thread state made for a thread that has none, and dropped after).
class Gil {
 public:
  Gil() : state_(PyGILState_Ensure()) {}
  ~Gil() { PyGILState_Release(state_); }
  Gil(const Gil&) = delete;
  Gil& operator=(const Gil&) = delete;

 private:
  PyGILState_STATE state_;
};

// Ends a render that runs past its time. Its thread waits for the render's deadline; past it,
// it raises TemplateLimitError in the rendering thread (CPython's asynchronous exception, which
// the interpreter's loop takes between two bytecodes). A render pays nothing for it: a trace
// function called on every line of the template's code tripled a render's time.
class RenderWatchdog {
 public:
  explicit RenderWatchdog(PyObject* error) : error_(error) {
    std::thread([this] { watch(); }).detach();  // lives as long as the process
  }
  // Both with the interpreter's lock held, by the rendering thread: the watchdog raises only
  // while it holds that lock itself, so a render that has ended is never hit.
  void arm(std::chrono::steady_clock::time_point deadline) {
    std::lock_guard lock(mutex_);
    thread_ = PyThread_get_thread_ident();
    deadline_ = deadline;
    armed_ = true;
    fired_ = false;
    changed_.notify_all();
  }
  // Whether it fired (the exception may still be pending: dropped here).
  bool disarm() {
    std::lock_guard lock(mutex_);
    armed_ = false;
    if (fired_) PyThreadState_SetAsyncExc(thread_, nullptr);
    changed_.notify_all();
    return fired_;
  }

 private:
  void watch() {
    std::unique_lock lock(mutex_);
    for (;;) {
      changed_.wait(lock, [&] { return armed_ && !fired_; });
      if (changed_.wait_until(lock, deadline_, [&] { return !armed_; })) continue;
      lock.unlock();
      {
        Gil gil;  // the rendering thread lets it go every few milliseconds
        std::lock_guard check(mutex_);
        if (armed_ && !fired_ && std::chrono::steady_clock::now() >= deadline_) {
          PyThreadState_SetAsyncExc(thread_, error_);
          fired_ = true;
        }
      }
      lock.lock();
    }
  }

  PyObject* error_;
  std::mutex mutex_;
  std::condition_variable changed_;
  unsigned long thread_ = 0;
  std::chrono::steady_clock::time_point deadline_;
  bool armed_ = false;
  bool fired_ = false;
};

std::timed_mutex& render_mutex() {
  static std::timed_mutex mutex;
  return mutex;
}

// The interpreter, started once: a start that failed is not tried again (the runtime is half up),
// and every later use says why it failed.
Interpreter& interpreter() {
  static std::exception_ptr failed;
  static Interpreter* const state = []() -> Interpreter* {
    try {
      return start_interpreter();
    } catch (...) {
      failed = std::current_exception();
      return nullptr;
    }
  }();
  if (state == nullptr) std::rethrow_exception(failed);
  return *state;
}

}  // namespace

RenderWatchdog& watchdog() {
  static RenderWatchdog* const dog = new RenderWatchdog(interpreter().limit_error);
  return *dog;
}

JinjaRenderer::JinjaRenderer() {
  (void)interpreter();
  (void)watchdog();
}

JinjaRenderer& JinjaRenderer::instance() {
  static JinjaRenderer* const renderer = new JinjaRenderer;
  return *renderer;
}

namespace {

// Calls the interpreter's `function` for a template `source`, within `limits`: the template's
// size checked first, its time by the watchdog, its memory by a PythonMemoryBudget of
// limits.max_memory_bytes plus four times `input_bytes` (what the template reads, which it may
// copy); `arguments` (made under the interpreter's lock, outside the budget) are what it is
// called with. A Python error becomes a ValueError with its text (Jinja2's message, as vLLM
// answers it).
template <class Result, class Arguments>
Result bounded(const std::string& source, const RenderLimits& limits, std::size_t input_bytes,
               py::object Interpreter::*function, Arguments&& arguments) {
  const auto deadline = std::chrono::steady_clock::now() + limits.time;
  auto out_of_time = [&] {
    std::ostringstream limit;
    limit << std::chrono::duration<double>(limits.time).count();
    return protocol::ValueError("the chat template did not render within " + limit.str() + " s");
  };
  if (source.size() > limits.max_template_bytes) {
    throw protocol::ValueError("the chat template has " + std::to_string(source.size()) +
                               " bytes; at most " + std::to_string(limits.max_template_bytes) +
                               " are taken");
  }
  // Renders take turns; the wait for one's turn counts against its time.
  std::unique_lock lock(render_mutex(), std::defer_lock);
  if (!lock.try_lock_until(deadline)) throw out_of_time();
  Interpreter& python = interpreter();
  RenderWatchdog& dog = watchdog();
  Gil gil;
  // Disarmed however the call ends: armed, the watchdog would hit a later, unrelated render.
  struct Armed {
    RenderWatchdog& dog;
    bool fired = false;
    ~Armed() {
      if (!fired) dog.disarm();
    }
    bool end() {
      fired = true;
      return dog.disarm();
    }
  } armed{dog};
  dog.arm(deadline);
  // Saturating: a limit near SIZE_MAX means "unbounded", never a tiny budget after a wrap.
  const std::size_t headroom = input_bytes > SIZE_MAX / 8 ? SIZE_MAX : 4 * input_bytes;
  const std::size_t budget =
      limits.max_memory_bytes > SIZE_MAX - headroom ? SIZE_MAX : limits.max_memory_bytes + headroom;
  std::optional<std::string> error;
  Result result{};
  try {
    const py::tuple args = arguments(python);
    // Only the call itself runs under the budget: pybind11 reading its result or its error
    // needs memory of its own, and must not fail for the template's sake.
    PyObject* out = nullptr;
    bool out_of_memory = false;
    {
      PythonMemoryBudget within(budget);
      out = PyObject_Call((python.*function).ptr(), args.ptr(), nullptr);
      // A refused allocation fails the render even where Python swallowed the MemoryError: what
      // it returned may not be what the template renders.
      out_of_memory = within.exceeded();
    }
    if (out_of_memory) {
      Py_XDECREF(out);
      PyErr_Clear();
      error = "the chat template needed more than " + std::to_string(budget >> 20) +
              " MiB of memory to render";
    } else if (out == nullptr) {
      throw py::error_already_set();
    } else {
      result = py::reinterpret_steal<py::object>(out).template cast<Result>();
    }
  } catch (py::error_already_set& e) {
    // Jinja2's message, as vLLM answers it; `e` goes while the interpreter's lock is held.
    try {
      error = py::str(e.value());
    } catch (...) {
      error = "the chat template failed, and its error could not be read";
    }
  } catch (const py::cast_error& e) {
    error = std::string("the chat template's result was not what it should be: ") + e.what();
  }
  if (armed.end()) throw out_of_time();
  if (error) throw protocol::ValueError(*error);
  return result;
}

}  // namespace

std::string JinjaRenderer::render(const std::string& source,
                                  const nlohmann::ordered_json& variables,
                                  const RenderLimits& limits) {
  if (!variables.is_object()) {
    throw protocol::ValueError("a chat template's variables are a JSON object");
  }
  const std::string variables_json = variables.dump();
  return bounded<std::string>(
      source, limits, variables_json.size(), &Interpreter::render, [&](Interpreter& python) {
        return py::make_tuple(source, python.load_json(variables_json), limits.max_chars);
      });
}

bool JinjaRenderer::iterates_over_content(const std::string& source, const RenderLimits& limits) {
  return bounded<bool>(source, limits, 0, &Interpreter::iterates_over_content,
                       [&](Interpreter&) { return py::make_tuple(source); });
}

std::string JinjaRenderer::jinja_version() {
  return interpreter().jinja_version;
}

}  // namespace hotswap::worker
