// vkattn's compiled module (`vkattn._vkattn`): the engine's public API as Python sees it — devices,
// Context, one attention call — and its exceptions: InvalidArgument as ValueError, VulkanError,
// ResourceLimit and DeviceLost as subclasses of RuntimeError. The package's Python modules build the
// PyTorch-style API on it (python/vkattn).
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "attention_call.hpp"
#include "device_objects.hpp"
#include "mha_call.hpp"
#include "vkattn/vkattn.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace {

nb::dict device_dict(const vkattn::DeviceInfo& d) {
    nb::dict out;
    out["index"] = d.index;
    out["name"] = d.name;
    out["type"] = d.type;
    out["driver"] = d.driver;
    out["api_version"] = d.api_version;
    out["subgroup_size"] = d.subgroup_size;
    out["shared_memory_bytes"] = d.shared_memory_bytes;
    out["max_storage_buffer_range"] = d.max_storage_buffer_range;
    out["fp16_storage"] = d.fp16_storage;
    out["fp16_arithmetic"] = d.fp16_arithmetic;
    out["inf_nan_preserve"] = d.inf_nan_preserve;
    out["maximal_reconvergence"] = d.maximal_reconvergence;
    nb::list heaps;
    for (const vkattn::MemoryHeap& h : d.heaps) {
        nb::dict heap;
        heap["bytes"] = h.bytes;
        heap["device_local"] = h.device_local;
        heaps.append(heap);
    }
    out["heaps"] = heaps;
    out["default"] = d.default_choice;
    out["rejected"] = d.rejected;
    // What decides how work is cut for the device (vk-attn devices --json has the same keys).
    out["uuid"] = d.uuid;
    out["compute_units"] = d.compute_units;
    out["compute_units_source"] = d.compute_units_source;
    out["min_subgroup_size"] = d.min_subgroup_size;
    out["max_subgroup_size"] = d.max_subgroup_size;
    out["subgroup_size_control"] = d.subgroup_size_control;
    nb::list shapes;
    for (const vkattn::CooperativeMatrixShape& c : d.cooperative_matrix) {
        nb::dict shape;
        shape["m"] = c.m;
        shape["n"] = c.n;
        shape["k"] = c.k;
        shape["a"] = c.a;
        shape["b"] = c.b;
        shape["c"] = c.c;
        shape["result"] = c.result;
        shape["scope"] = c.scope;
        shape["flexible"] = c.flexible;  // m, n, k: granularities, up to max_dimension
        shape["max_dimension"] = c.max_dimension;
        shapes.append(shape);
    }
    out["cooperative_matrix"] = shapes;
    out["matrix_units"] = d.matrix_units;  // the cooperative-matrix kernels on the units, else portable
    out["matrix_units_off"] = d.matrix_units_off;
    out["bf16_matrix_units"] = d.bf16_matrix_units;  // bf16 storage on the units too, else refused there
    out["bf16_matrix_units_off"] = d.bf16_matrix_units_off;
    out["workgroup_matrices"] = d.workgroup_matrices;  // the forward on workgroup-scope matrices (flash_cm2.comp)
    out["workgroup_matrices_off"] = d.workgroup_matrices_off;
    out["workgroup_bf16_matrices"] = d.workgroup_bf16_matrices;  // bf16 operands on them too
    out["bf16_shader"] = d.bf16_shader;
    out["fp8_shader"] = d.fp8_shader;
    out["timestamp_period_ns"] = d.timestamp_period_ns;
    return out;
}

}  // namespace

NB_MODULE(_vkattn, m) {
    m.doc() = "vkattn's compiled core: use the vkattn package's functions.";

    // Translators run newest first: the three classes below before this catch-all for the rest.
    nb::register_exception_translator([](const std::exception_ptr& p, void*) {
        try {
            std::rethrow_exception(p);
        } catch (const vkattn::InvalidArgument& e) {
            PyErr_SetString(PyExc_ValueError, e.what());
        } catch (const vkattn::Error& e) {
            PyErr_SetString(PyExc_RuntimeError, e.what());
        }
    });
    nb::exception<vkattn::VulkanError>(m, "VulkanError", PyExc_RuntimeError);
    nb::exception<vkattn::ResourceLimit>(m, "ResourceLimit", PyExc_RuntimeError);
    nb::exception<vkattn::DeviceLost>(m, "DeviceLost", PyExc_RuntimeError);

    m.def("devices", [] {
        nb::list out;
        for (const vkattn::DeviceInfo& d : vkattn::list_devices()) out.append(device_dict(d));
        return out;
    }, "Every Vulkan device, as `vk-attn devices` lists them.");

    nb::class_<vkattn::Context>(m, "Context")
        .def("__init__",
             [](vkattn::Context* self, nb::object device, bool validation) {
                 vkattn::ContextOptions options;
                 if (!device.is_none()) options.device = nb::cast<std::string>(nb::str(device));
                 options.validation = validation;
                 nb::gil_scoped_release unlocked;
                 new (self) vkattn::Context(options);
             },
             "device"_a = nb::none(), "validation"_a = false)
        .def_prop_ro("device", [](const vkattn::Context& c) { return device_dict(c.device()); })
        .def("validation_messages", &vkattn::Context::validation_messages)
        .def("clear_validation_messages", &vkattn::Context::clear_validation_messages);

    nb::class_<vkattn::python::AttentionCall>(m, "AttentionCall")
        .def(nb::init<>())
        .def_rw("q", &vkattn::python::AttentionCall::q)
        .def_rw("k", &vkattn::python::AttentionCall::k)
        .def_rw("v", &vkattn::python::AttentionCall::v)
        .def_rw("out", &vkattn::python::AttentionCall::out)
        .def_rw("bool_mask", &vkattn::python::AttentionCall::bool_mask)
        .def_rw("float_mask", &vkattn::python::AttentionCall::float_mask)
        .def_rw("kv_lengths", &vkattn::python::AttentionCall::kv_lengths)
        .def_rw("alibi_slopes", &vkattn::python::AttentionCall::alibi_slopes)
        .def_rw("sinks", &vkattn::python::AttentionCall::sinks)
        .def_rw("lse", &vkattn::python::AttentionCall::lse)
        .def_rw("weights", &vkattn::python::AttentionCall::weights)
        .def_rw("logits", &vkattn::python::AttentionCall::logits)
        .def_rw("logits_stage", &vkattn::python::AttentionCall::logits_stage)
        .def_rw("scale", &vkattn::python::AttentionCall::scale)
        .def_rw("softcap", &vkattn::python::AttentionCall::softcap)
        .def_rw("alibi_max_bias", &vkattn::python::AttentionCall::alibi_max_bias)
        .def_rw("causal", &vkattn::python::AttentionCall::causal)
        .def_rw("causal_offset", &vkattn::python::AttentionCall::causal_offset)
        .def_rw("diagonal_offset", &vkattn::python::AttentionCall::diagonal_offset)
        .def_rw("diagonal_bottom_right", &vkattn::python::AttentionCall::diagonal_bottom_right)
        .def_rw("window_left", &vkattn::python::AttentionCall::window_left)
        .def_rw("window_right", &vkattn::python::AttentionCall::window_right)
        .def_rw("dropout", &vkattn::python::AttentionCall::dropout)
        .def_rw("seed", &vkattn::python::AttentionCall::seed)
        .def_rw("impl", &vkattn::python::AttentionCall::impl);

    nb::class_<vkattn::python::Gradients>(m, "Gradients")
        .def(nb::init<>())
        .def_rw("dq", &vkattn::python::Gradients::dq)
        .def_rw("dk", &vkattn::python::Gradients::dk)
        .def_rw("dv", &vkattn::python::Gradients::dv)
        .def_rw("d_sinks", &vkattn::python::Gradients::d_sinks);

    m.def("run_attention_backward",
          [](nb::object context, const vkattn::python::AttentionCall& call, const vkattn::python::Input& grad_out,
             const vkattn::python::Gradients& gradients) {
              vkattn::Context* ctx = context.is_none() ? nullptr : nb::cast<vkattn::Context*>(context);
              return vkattn::python::run_attention_backward(ctx, call, grad_out, gradients);
          },
          "context"_a.none(), "call"_a, "grad_out"_a, "gradients"_a,
          "The gradients `gradients` asks for, on `context` or on the CPU reference when it is None.");

    using vkattn::python::MhaCall;
    nb::class_<MhaCall>(m, "MhaCall")
        .def(nb::init<>())
        .def_rw("embed_dim", &MhaCall::embed_dim)
        .def_rw("num_heads", &MhaCall::num_heads)
        .def_rw("kdim", &MhaCall::kdim)
        .def_rw("vdim", &MhaCall::vdim)
        .def_rw("bias", &MhaCall::bias)
        .def_rw("batch_first", &MhaCall::batch_first)
        .def_rw("parameters", &MhaCall::parameters)
        .def_rw("query", &MhaCall::query)
        .def_rw("key", &MhaCall::key)
        .def_rw("value", &MhaCall::value)
        .def_rw("key_padding_mask", &MhaCall::key_padding_mask)
        .def_rw("attn_mask", &MhaCall::attn_mask)
        .def_rw("key_padding_mask_bool", &MhaCall::key_padding_mask_bool)
        .def_rw("attn_mask_bool", &MhaCall::attn_mask_bool)
        .def_rw("average_attn_weights", &MhaCall::average_attn_weights)
        .def_rw("impl", &MhaCall::impl)
        .def_rw("dropout", &MhaCall::dropout)
        .def_rw("seed", &MhaCall::seed);
    m.def("mha_forward", &vkattn::python::mha_forward, "context"_a, "call"_a, "out"_a, "attn_weights"_a.none(),
          "The layer's forward: out and, when given, attn_weights written.");
    m.def("mha_backward", &vkattn::python::mha_backward, "context"_a, "call"_a, "grad_out"_a, "d_query"_a,
          "d_key"_a.none(), "d_value"_a.none(), "d_parameters"_a,
          "The layer's gradients for grad_out, written into the arrays given.");

    using vkattn::python::Cache;
    using vkattn::python::Tensor;
    // A Tensor or Cache keeps its Context alive (keep_alive on the context argument).
    nb::class_<Tensor>(m, "Tensor")
        .def_static("from_numpy",
                    [](vkattn::Context& context, const vkattn::python::Input& array, std::optional<std::string> dtype) {
                        return vkattn::python::tensor_from_numpy(context, array, dtype);
                    },
                    "context"_a, "array"_a, "dtype"_a.none() = nb::none(), nb::keep_alive<0, 1>())
        .def_static("empty", &vkattn::python::tensor_empty, "context"_a, "shape"_a, "dtype"_a, nb::keep_alive<0, 1>())
        .def_prop_ro("shape", [](const Tensor& t) {
            const auto& s = t.tensor.shape();
            return std::vector<std::int64_t>(s.begin(), s.end());
        })
        .def_prop_ro("dtype", [](const Tensor& t) { return vkattn::to_string(t.tensor.dtype()); })
        .def("to_numpy", &vkattn::python::tensor_to_numpy, "out"_a);

    nb::class_<Cache>(m, "Cache")
        .def(nb::init<vkattn::Context&, std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t,
                      const std::string&, bool, std::int64_t>(),
             "context"_a, "batch"_a, "kv_heads"_a, "dim"_a, "dim_v"_a, "capacity"_a, "dtype"_a, "paged"_a, "block_size"_a,
             nb::keep_alive<1, 2>())
        .def("append", &Cache::append, "k"_a, "v"_a, "counts"_a)
        .def("attention", &Cache::attention, "q"_a, "o"_a, "lse"_a.none(), "options"_a)
        .def("reset", &Cache::reset, "lengths"_a)
        .def_prop_ro("lengths", &Cache::lengths)
        .def_prop_ro("capacity", &Cache::capacity);

    m.def("run_attention",
          [](nb::object context, const vkattn::python::AttentionCall& call) {
              vkattn::Context* ctx = context.is_none() ? nullptr : nb::cast<vkattn::Context*>(context);
              return vkattn::python::run_attention(ctx, call);
          },
          "context"_a.none(), "call"_a, "Runs `call` on `context`, or on the CPU reference when it is None.");
}
