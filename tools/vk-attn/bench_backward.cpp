// vk-attn bench --backward: one point (bench_common.hpp).
#include <algorithm>
#include <iostream>
#include <optional>
#include <tuple>

#include "bench_common.hpp"
#include "parse_impl.hpp"
#include "plot.hpp"
#include "vkattn/testing/attention_timing.hpp"
#include "vkattn/testing/compare.hpp"
#include "vkattn/testing/rounded_operands.hpp"
#include "vkattn/testing/random.hpp"

namespace vkattn::tool {

// One point of --backward: the forward's and the backward's median GPU times, the backward's GFLOP/s
// (and its ratio to the GEMM ceiling); with --validate the gradients against the reference first.
// False when the validation failed.
bool run_backward_point(Context& context, const BenchOptions& o, const Point& p, const AttentionInputs& in,
                        const AttentionOptions& options, DType dtype, Layout layout, std::mt19937& rng,
                        const std::string& feature_text, double ceiling, Printer& printer, std::vector<Row>& plotted,
                        bool progress_bar) {
    const testing::HostTensor grad_out = testing::random_tensor(rng, dtype, layout, {p.B, p.Hq, p.Nq, p.Dv});
    testing::HostTensor dq = testing::nan_tensor(dtype, layout, {p.B, p.Hq, p.Nq, p.Dk});
    testing::HostTensor dk = testing::nan_tensor(in.k.dtype, layout, {p.B, p.Hkv, p.Nkv, p.Dk});
    testing::HostTensor dv = testing::nan_tensor(in.v.dtype, layout, {p.B, p.Hkv, p.Nkv, p.Dv});
    std::vector<float> d_sinks(in.sinks.size());
    AttentionGradients grads{.dq = dq.mutable_view(), .dk = dk.mutable_view(), .dv = dv.mutable_view()};
    if (!d_sinks.empty()) grads.d_sinks = d_sinks.data();
    testing::HostTensor o_host = testing::nan_tensor(dtype, layout, {p.B, p.Hq, p.Nq, p.Dv});
    const AttentionOutputs out{.o = o_host.mutable_view()};

    std::optional<double> rel_err;
    bool ok = true;
    AttentionReport forward, backward;
    std::vector<double> forward_ms, backward_ms;
    with_flag_names([&] {
        if (o.validate) {
            const DType product_type = attention_backward(context, in, grad_out.view(), grads, options).product_type;
            testing::HostTensor rq = dq, rk = dk, rv = dv;
            std::vector<float> rs = d_sinks;
            AttentionGradients ref{.dq = rq.mutable_view(), .dk = rk.mutable_view(), .dv = rv.mutable_view()};
            if (!rs.empty()) ref.d_sinks = rs.data();
            // Products of 16-bit operands are checked on those operands (testing::rounded_backward_operands).
            const auto rounded =
                product_type != DType::f32 ? testing::rounded_backward_operands(in, grad_out.view(), product_type) : std::nullopt;
            reference_attention_backward(rounded ? rounded->forward.inputs : in, rounded ? rounded->grad_out.view() : grad_out.view(),
                                         ref, options);
            rel_err = 0.0;
            const testing::Tolerance tol = testing::gradient_tolerance_for(dtype, product_type);
            for (const auto& [got, want, name] : {std::tuple{&dq, &rq, "dq"}, std::tuple{&dk, &rk, "dk"}, std::tuple{&dv, &rv, "dv"}}) {
                const testing::Comparison c = testing::compare(got->doubles(), want->doubles(), tol);
                rel_err = std::max(*rel_err, c.relative_error);
                if (!c.ok) {
                    ok = false;
                    if (progress_bar) std::cerr << '\n';
                    std::cerr << "vk-attn: backward validation failed at B=" << p.B << " Hq=" << p.Hq << " Hkv=" << p.Hkv
                              << " Nq=" << p.Nq << " Nkv=" << p.Nkv << " Dk=" << p.Dk << " Dv=" << p.Dv << ", " << name
                              << ": " << c.message << '\n';
                }
            }
        }
        if (o.inputs == "host") {
            warm_up_calls(warm_up_of(o, context), [&] {
                attention(context, in, out, options);
                attention_backward(context, in, grad_out.view(), grads, options);
            });
            for (int r = 0; r < o.repeat; ++r) {
                forward = attention(context, in, out, options);
                forward_ms.push_back(forward.gpu_ms);
                backward = attention_backward(context, in, grad_out.view(), grads, options);
                backward_ms.push_back(backward.gpu_ms);
            }
        } else {
            // Each pass timed on device tensors, its runs back to back (testing::attention_timing.hpp).
            testing::AttentionTiming timed = testing::time_attention(context, in, out, options, warm_up_of(o, context), o.repeat);
            forward = timed.report;
            forward_ms = std::move(timed.samples_ms);
            timed = testing::time_attention_backward(context, in, grad_out.view(), grads, options, warm_up_of(o, context), o.repeat);
            backward = timed.report;
            backward_ms = std::move(timed.samples_ms);
        }
    });
    const testing::Timing f = testing::summarize(forward_ms), t = testing::summarize(backward_ms);
    Row r;
    r.add("impl", std::string("backward"));
    r.add("path", to_string(backward.path));  // fused, or unfused (three stages)
    r.add("dtype", to_string(dtype));
    add_point(r, p, o.causal, feature_text, t);
    r.add("gflops", backward.flops / (t.median_ms * 1e6));
    if (ceiling > 0) r.add("vs_gemm", backward.flops / (t.median_ms * 1e6) / ceiling);
    r.add("fwd_ms", f.median_ms);
    r.add("fwd_bwd_ms", f.median_ms + t.median_ms);
    r.add("fwd_bwd_gflops", (forward.flops + backward.flops) / ((f.median_ms + t.median_ms) * 1e6));
    r.add("device_mib", static_cast<double>(backward.device_bytes) / (1 << 20));
    r.add("inputs", o.inputs);
    add_shader_clock(r, context);
    if (rel_err) {
        r.add("rel_l2_err", *rel_err);
        r.add("valid", ok);
    }
    r.add("chosen_by", backward.chosen_by);
    r.add("variant", backward.variant + " after " + forward.variant);
    printer.print(r);
    plotted.push_back(r);
    return ok;
}

}  // namespace vkattn::tool
