// The `hotswap._C` extension: the trainer SDK for Python trainers. The `hotswap` package
// (trainer_sdk/python/hotswap/) re-exports it beside the pure-Python client.
#include "trainer_sdk/python/bindings/conversions.hpp"

PYBIND11_MODULE(_C, m) {
  m.doc() = "hotswap's trainer SDK: push a PyTorch trainer's weights into hotswap workers.";
  // torch first: its tensor and dtype types must exist before any binding converts one.
  pybind11::module_::import("torch");
  hotswap::python::register_exceptions(m);
  hotswap::python::bind_weight_sources(m);
  hotswap::python::bind_clients(m);
  hotswap::python::bind_init_infos(m);
  hotswap::python::bind_engines(m);
}
