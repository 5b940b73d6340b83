// hotswap.ParamMeta, hotswap.WeightSource (subclassable in Python, as vLLM's ABC),
// hotswap.TensorListSource and hotswap.SharedWeightArena.
//
// A Python source is called from the engine's C++ frames, often with the GIL released by the
// push that drives them, and sometimes from an engine's side thread: every call into Python
// takes the GIL for itself, and every Python object a C++ stream holds is dropped under it.
#include <vector>

#include "model_loader/checkpoint.hpp"
#include "protocol/errors.hpp"
#include "protocol/layerwise_groups.hpp"
#include "trainer_sdk/python/bindings/conversions.hpp"
#include "trainer_sdk/shared_weight_arena.hpp"
#include "trainer_sdk/tensor_list_source.hpp"
#include "trainer_sdk/weight_source.hpp"
#include "transport/torch_dtype.hpp"

namespace hotswap::python {
namespace {

using trainer_sdk::GroupStream;
using trainer_sdk::NamedWeight;
using trainer_sdk::WeightGroup;
using trainer_sdk::WeightSource;
using trainer_sdk::WeightStream;

// A Python object owned by C++ code that may drop it on any thread.
class HeldObject {
 public:
  explicit HeldObject(py::object object) : object_(std::move(object)) {}
  ~HeldObject() {
    py::gil_scoped_acquire gil;
    object_ = py::object();
  }
  HeldObject(const HeldObject&) = delete;
  HeldObject& operator=(const HeldObject&) = delete;
  const py::object& get() const { return object_; }

 private:
  py::object object_;
};

// The tensor of a yielded pair: None is a parameter this rank does not hold.
at::Tensor yielded_tensor(py::handle value, const std::string& name, const char* where) {
  if (value.is_none()) return {};
  return tensor_argument(value, std::string(where) + " yielded '" + name + "' whose tensor");
}

// Advances a Python iterator that yields pairs: the next pair, or nullopt at its end. A Python
// exception raised by the iterator comes out as the protocol error of its kind; anything but a
// pair is a TypeError saying what `where` must yield.
std::optional<py::tuple> next_pair(const py::object& iterator, const char* where,
                                   const char* pair) {
  PyObject* item = PyIter_Next(iterator.ptr());
  if (item == nullptr) {
    if (PyErr_Occurred() != nullptr) {
      py::error_already_set error;
      rethrow_python_error(error, where);
    }
    return std::nullopt;
  }
  auto object = py::reinterpret_steal<py::object>(item);
  if (!py::isinstance<py::tuple>(object) || py::len(object) != 2) {
    throw py::type_error(std::string(where) + " must yield " + pair + " pairs, got " +
                         py::repr(object).cast<std::string>());
  }
  return py::reinterpret_borrow<py::tuple>(object);
}

class PythonWeightStream final : public WeightStream {
 public:
  explicit PythonWeightStream(py::object iterator) : iterator_(std::move(iterator)) {}

  std::optional<NamedWeight> next() override {
    static constexpr const char* kWhere = "WeightSource.__iter__()";
    py::gil_scoped_acquire gil;
    auto item = next_pair(iterator_.get(), kWhere, "(name: str, tensor)");
    if (!item) return std::nullopt;
    if (!py::isinstance<py::str>((*item)[0])) {
      throw py::type_error(std::string(kWhere) + " must yield (name: str, tensor) pairs, got " +
                           py::repr(*item).cast<std::string>());
    }
    NamedWeight weight;
    weight.name = (*item)[0].cast<std::string>();
    weight.tensor = yielded_tensor((*item)[1], weight.name, kWhere);
    return weight;
  }

 private:
  HeldObject iterator_;
};

class PythonGroupStream final : public GroupStream {
 public:
  explicit PythonGroupStream(py::object iterator) : iterator_(std::move(iterator)) {}

  std::optional<WeightGroup> next() override {
    static constexpr const char* kWhere = "WeightSource.iter_groups()";
    py::gil_scoped_acquire gil;
    auto item = next_pair(iterator_.get(), kWhere, "(names, tensors)");
    if (!item) return std::nullopt;
    WeightGroup group;
    group.names = (*item)[0].cast<std::vector<std::string>>();
    auto tensors = py::reinterpret_borrow<py::sequence>((*item)[1]);
    if (tensors.size() != group.names.size()) {
      throw protocol::ValueError(std::string(kWhere) + " yielded " +
                                 std::to_string(group.names.size()) + " names but " +
                                 std::to_string(tensors.size()) + " tensors");
    }
    for (std::size_t i = 0; i < group.names.size(); ++i) {
      group.tensors.push_back(yielded_tensor(tensors[i], group.names[i], kWhere));
    }
    return group;
  }

 private:
  HeldObject iterator_;
};

// The C++ side of a Python subclass of hotswap.WeightSource.
class PythonWeightSource final : public WeightSource {
 public:
  std::vector<protocol::ParamMeta> metadata() override {
    py::gil_scoped_acquire gil;
    // vLLM 0.33 calls metadata(); 0.34 reads it as a (cached) property. (get_override would
    // refuse the property's value: it is not callable.)
    py::object result;
    try {
      result = py::getattr(self(), "metadata", py::none());
      if (PyCallable_Check(result.ptr())) result = result();
    } catch (py::error_already_set& error) {
      rethrow_python_error(error, "WeightSource.metadata");
    }
    if (result.is_none()) {
      throw protocol::RuntimeError(
          "a hotswap.WeightSource subclass must implement metadata (a method, or a property "
          "as vLLM 0.34 has it)");
    }
    std::vector<protocol::ParamMeta> meta;
    std::size_t i = 0;
    for (py::handle item : py::iter(result)) {
      meta.push_back(param_meta_from(item, "WeightSource.metadata()[" + std::to_string(i++) + "]"));
    }
    return meta;
  }

  std::unique_ptr<WeightStream> iter() override {
    py::gil_scoped_acquire gil;
    // vLLM 0.33's sources iterate; 0.34's implement iter_full() (each owned parameter, whole).
    const char* method = py::get_override(this, "__iter__")    ? "__iter__"
                         : py::get_override(this, "iter_full") ? "iter_full"
                                                               : "__iter__";
    py::object iterable = call_override(method, /*required=*/true);
    return std::make_unique<PythonWeightStream>(iterator_of(iterable, method));
  }

  std::optional<std::unordered_set<std::string>> held_names() override {
    py::gil_scoped_acquire gil;
    if (!py::get_override(this, "held_names")) return WeightSource::held_names();
    py::object result = call_override("held_names", /*required=*/false);
    if (result.is_none()) return std::nullopt;
    std::unordered_set<std::string> held;
    for (py::handle name : py::iter(result)) {
      if (!py::isinstance<py::str>(name)) {
        throw py::type_error("WeightSource.held_names() must give names (str), got " +
                             py::repr(name).cast<std::string>());
      }
      held.insert(name.cast<std::string>());
    }
    return held;
  }

  std::unique_ptr<GroupStream> iter_groups() override {
    {
      py::gil_scoped_acquire gil;
      if (py::get_override(this, "iter_groups")) {
        py::object iterable = call_override("iter_groups", /*required=*/false);
        return std::make_unique<PythonGroupStream>(iterator_of(iterable, "iter_groups"));
      }
    }
    return WeightSource::iter_groups();
  }

 private:
  // Calls the Python subclass's `name` (the GIL held). A missing required method is a
  // RuntimeError naming it; a Python exception comes out as the protocol error of its kind.
  py::object call_override(const char* name, bool required) {
    py::function method = py::get_override(this, name);
    if (!method) {
      if (!required) return py::none();
      throw protocol::RuntimeError(std::string("a hotswap.WeightSource subclass must implement ") +
                                   name + "()");
    }
    try {
      return method();
    } catch (py::error_already_set& error) {
      rethrow_python_error(error, std::string("WeightSource.") + name + "()");
    }
  }

  // The Python object this is the C++ side of.
  py::object self() const {
    py::handle handle = py::detail::get_object_handle(
        static_cast<const WeightSource*>(this), py::detail::get_type_info(typeid(WeightSource)));
    if (!handle) throw protocol::RuntimeError("the Python WeightSource object is gone");
    return py::reinterpret_borrow<py::object>(handle);
  }

  // iter(iterable): a TypeError naming the method when what it returned is not iterable.
  static py::object iterator_of(const py::object& iterable, const char* name) {
    PyObject* iterator = PyObject_GetIter(iterable.ptr());
    if (iterator == nullptr) {
      PyErr_Clear();
      throw py::type_error(std::string("WeightSource.") + name +
                           "() must return an iterable, got " +
                           py::repr(iterable).cast<std::string>());
    }
    return py::reinterpret_steal<py::object>(iterator);
  }
};

// A C++ stream iterated from Python: for sources built in C++ (TensorListSource).
class StreamIterator {
 public:
  explicit StreamIterator(std::unique_ptr<WeightStream> stream) : stream_(std::move(stream)) {}
  py::tuple next() {
    auto item = stream_->next();
    if (!item) throw py::stop_iteration();
    return py::make_tuple(item->name, item->held() ? py::cast(item->tensor) : py::none());
  }

 private:
  std::unique_ptr<WeightStream> stream_;
};

std::vector<protocol::ParamMeta> metadata_list(const py::iterable& items, const std::string& what) {
  std::vector<protocol::ParamMeta> meta;
  std::size_t i = 0;
  for (py::handle item : items) {
    meta.push_back(param_meta_from(item, what + "[" + std::to_string(i++) + "]"));
  }
  return meta;
}

std::vector<std::int64_t> shape_argument(const py::handle& shape) {
  try {
    return shape.cast<std::vector<std::int64_t>>();
  } catch (const py::cast_error&) {
    throw py::type_error("shape must be a sequence of ints, got " +
                         py::repr(shape).cast<std::string>());
  }
}

}  // namespace

void bind_weight_sources(py::module_& m) {
  py::class_<protocol::Placement>(
      m, "Placement", "How a parameter lies over one mesh axis: Replicate() or Shard(dim).")
      .def_property_readonly("dim",
                             [](const protocol::Placement& p) -> py::object {
                               if (p.kind == protocol::Placement::Kind::kShard)
                                 return py::int_(p.dim);
                               return py::none();
                             })
      .def("__eq__",
           [](const protocol::Placement& a, const protocol::Placement& b) { return a == b; })
      .def("__repr__", [](const protocol::Placement& p) {
        return p.kind == protocol::Placement::Kind::kShard
                   ? "Shard(dim=" + std::to_string(p.dim) + ")"
                   : std::string("Replicate()");
      });
  m.def("Replicate", &protocol::Placement::replicate,
        "Every coordinate along this mesh axis holds the whole extent (vLLM's Replicate()).");
  m.def("Shard", &protocol::Placement::shard, py::arg("dim"),
        "This mesh axis splits tensor dim `dim` as torch.chunk does (vLLM's Shard(dim)).");

  py::class_<protocol::ParamMeta>(
      m, "ParamMeta",
      "Name, wire dtype and full (Hugging Face) shape of one parameter, and (vLLM 0.34,\n"
      "keyword-only) the trainer ranks that own it, their mesh and the placements over it.")
      .def(py::init([](std::string name, py::handle dtype, py::handle shape, py::handle owners,
                       py::handle mesh_shape, py::handle placements) {
             protocol::ParamMeta meta{std::move(name), wire_dtype(dtype, "ParamMeta dtype"),
                                      shape_argument(shape)};
             meta.owners = owners_from(owners, "ParamMeta owners");
             if (!mesh_shape.is_none()) meta.mesh_shape = shape_argument(mesh_shape);
             meta.placements = placements_from(placements, "ParamMeta placements");
             protocol::check_ownership(meta);
             return meta;
           }),
           py::arg("name"), py::arg("dtype"), py::arg("shape"), py::kw_only(),
           py::arg("owners") = py::none(), py::arg("mesh_shape") = py::none(),
           py::arg("placements") = py::none())
      .def_property_readonly("owners",
                             [](const protocol::ParamMeta& p) -> py::object {
                               if (!p.owners) return py::none();
                               return py::tuple(py::cast(*p.owners));
                             })
      .def_property_readonly("mesh_shape",
                             [](const protocol::ParamMeta& p) -> py::object {
                               if (!p.owners) return py::none();
                               return py::tuple(py::cast(p.mesh_shape));
                             })
      .def_property_readonly("placements",
                             [](const protocol::ParamMeta& p) -> py::object {
                               if (p.placements.empty()) return py::none();
                               return py::tuple(py::cast(p.placements));
                             })
      .def_readonly("name", &protocol::ParamMeta::name)
      .def_property_readonly("dtype",
                             [](const protocol::ParamMeta& p) { return torch_dtype(p.dtype); })
      .def_property_readonly(
          "shape", [](const protocol::ParamMeta& p) { return py::tuple(py::cast(p.shape)); })
      .def("__eq__",
           [](const protocol::ParamMeta& a, const protocol::ParamMeta& b) { return a == b; })
      .def("__repr__", [](const protocol::ParamMeta& p) {
        return "ParamMeta(name=" + py::repr(py::str(p.name)).cast<std::string>() +
               ", dtype=" + py::repr(torch_dtype(p.dtype)).cast<std::string>() +
               ", shape=" + py::repr(py::tuple(py::cast(p.shape))).cast<std::string>() + ")";
      });

  py::class_<StreamIterator>(m, "_WeightStreamIterator")
      .def("__iter__", [](py::object self) { return self; })
      .def("__next__", &StreamIterator::next);

  py::class_<WeightSource, PythonWeightSource, std::shared_ptr<WeightSource>>(
      m, "WeightSource",
      "What a trainer sends (vLLM's WeightSource). Subclass it and implement metadata() and\n"
      "__iter__(); held_names() and iter_groups() are optional, as in vLLM. Tensors are\n"
      "passed to the engines without a copy.")
      .def(py::init<>())
      .def("groups", &WeightSource::groups, py::call_guard<py::gil_scoped_release>(),
           "This rank's layerwise groups, restricted to those holding a held name.")
      .def("held_names",
           [](WeightSource& self) -> py::object {
             auto held = self.held_names();
             if (!held) return py::none();
             return py::set(py::cast(*held));
           })
      .def("iter_groups", [](WeightSource& self) {
        std::unique_ptr<GroupStream> stream;
        {
          py::gil_scoped_release release;
          stream = self.iter_groups();
        }
        py::list groups;
        while (true) {
          std::optional<WeightGroup> group;
          {
            py::gil_scoped_release release;
            group = stream->next();
          }
          if (!group) break;
          py::list tensors;
          for (const auto& t : group->tensors)
            tensors.append(t.defined() ? py::cast(t) : py::none());
          groups.append(py::make_tuple(py::cast(group->names), tensors));
        }
        return py::iter(groups);
      });

  py::class_<trainer_sdk::TensorListSource, WeightSource,
             std::shared_ptr<trainer_sdk::TensorListSource>>(
      m, "TensorListSource",
      "A WeightSource over named tensors, iterated in the given order without a copy.\n"
      "TensorListSource([(name, tensor), ...]) holds every parameter;\n"
      "TensorListSource(metadata, {name: tensor}) is a rank holding part of the model.")
      .def(py::init([](const py::iterable& metadata, const py::dict& held) {
             auto meta = metadata_list(metadata, "TensorListSource metadata");
             std::map<std::string, at::Tensor> tensors;
             for (auto [name, tensor] : held) {
               const auto key = py::cast<std::string>(name);
               tensors[key] = tensor_argument(tensor, "TensorListSource tensor '" + key + "'");
             }
             return std::make_shared<trainer_sdk::TensorListSource>(std::move(meta),
                                                                    std::move(tensors));
           }),
           py::arg("metadata"), py::arg("held"))
      .def(py::init([](const py::iterable& pairs) {
             std::vector<std::pair<std::string, at::Tensor>> tensors;
             for (py::handle pair : pairs) {
               if (!py::isinstance<py::tuple>(pair) || py::len(pair) != 2 ||
                   !py::isinstance<py::str>(pair[py::int_(0)])) {
                 throw py::type_error("TensorListSource takes (name: str, tensor) pairs, got " +
                                      py::repr(pair).cast<std::string>());
               }
               const auto name = pair[py::int_(0)].cast<std::string>();
               tensors.emplace_back(
                   name,
                   tensor_argument(pair[py::int_(1)], "TensorListSource tensor '" + name + "'"));
             }
             return std::make_shared<trainer_sdk::TensorListSource>(std::move(tensors));
           }),
           py::arg("tensors"))
      .def("metadata", &trainer_sdk::TensorListSource::metadata)
      .def("__iter__",
           [](trainer_sdk::TensorListSource& self) { return StreamIterator(self.iter()); });

  m.def(
      "load_checkpoint",
      [](const std::string& directory) {
        // hotswap's own safetensors reader (the one the worker loads with, fuzzed), sharded
        // checkpoints included; each tensor copied out of the read-only mapping so that a
        // trainer owns and may train it.
        std::vector<std::pair<std::string, at::Tensor>> tensors;
        {
          py::gil_scoped_release release;
          auto checkpoint = model_loader::Checkpoint::open(directory);
          for (const auto& name : checkpoint.names()) {
            tensors.emplace_back(name, checkpoint.tensor(name).clone());
          }
        }
        py::dict out;
        for (auto& [name, tensor] : tensors)
          out[py::str(name)] = py::cast(std::move(tensor));
        return out;
      },
      py::arg("directory"),
      "{name: tensor} of a Hugging Face safetensors checkpoint directory, in file then data "
      "order; a ValueError naming what is wrong with a malformed one.");

  m.def("layerwise_groups", &protocol::layerwise_groups, py::arg("names"),
        "vLLM's layerwise_groups: one group before the first decoder layer, one per layer, one "
        "after.");

  using trainer_sdk::SharedWeightArena;
  py::class_<SharedWeightArena, std::shared_ptr<SharedWeightArena>>(
      m, "SharedWeightArena",
      "A trainer's weights in one POSIX shared-memory segment, read in place by shm workers on\n"
      "this host. Allocate parameters here (allocate, copy_in, or SharedWeightArena.from_module)\n"
      "and train them in place.")
      .def(py::init<std::size_t>(), py::arg("capacity_bytes"))
      .def_static(
          "bytes_for",
          [](const py::iterable& metadata) {
            return SharedWeightArena::bytes_for(metadata_list(metadata, "bytes_for metadata"));
          },
          py::arg("metadata"), "The room these parameters need, alignment included.")
      .def(
          "allocate",
          [](SharedWeightArena& self, const std::string& name, const py::handle& shape,
             const py::handle& dtype) {
            const auto sizes = shape_argument(shape);
            return self.allocate(name, sizes,
                                 transport::to_scalar_type(wire_dtype(dtype, "allocate dtype")));
          },
          py::arg("name"), py::arg("shape"), py::arg("dtype"),
          "An uninitialized tensor in the arena, registered under `name`.")
      .def(
          "copy_in",
          [](SharedWeightArena& self, const std::string& name, const py::handle& tensor) {
            return self.copy_in(name, tensor_argument(tensor, "copy_in tensor"));
          },
          py::arg("name"), py::arg("tensor"), "allocate, then copy `tensor` in.")
      .def(
          "holds",
          [](const SharedWeightArena& self, const std::string& name, const py::handle& tensor) {
            return self.holds(name, tensor_argument(tensor, "holds tensor"));
          },
          py::arg("name"), py::arg("tensor"))
      .def("__contains__", [](const SharedWeightArena& self,
                              const std::string& name) { return self.find(name) != nullptr; })
      .def_property_readonly("name", &SharedWeightArena::name)
      .def_property_readonly("capacity", &SharedWeightArena::capacity)
      .def_property_readonly("used", &SharedWeightArena::used);
}

}  // namespace hotswap::python
