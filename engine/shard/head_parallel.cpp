// Head parallelism (vkattn/multi_device.hpp): (batch, K/V head) units cut into one run per
// context, each run into blocks (shard/block_inputs.hpp), one thread per context.
#include <algorithm>
#include <exception>
#include <memory>
#include <thread>
#include <vector>

#include "attention/problem.hpp"
#include "shard/block_inputs.hpp"
#include "vkattn/context.hpp"
#include "vkattn/errors.hpp"
#include "vkattn/multi_device.hpp"

namespace vkattn {
namespace {

using detail::BlockBox;
using detail::Extent;

// Units [u0, u1) (u = b·Hkv + hk) as blocks of whole batches or of one batch's K/V heads.
std::vector<BlockBox> blocks_of(std::int64_t u0, std::int64_t u1, const detail::Problem& p) {
    std::vector<BlockBox> boxes;
    const Extent queries{0, p.Nq}, keys{0, p.Nkv};
    for (std::int64_t u = u0; u < u1;) {
        const std::int64_t b = u / p.Hkv, hk = u % p.Hkv;
        if (hk == 0 && u + p.Hkv <= u1) {
            const std::int64_t batches = (u1 - u) / p.Hkv;
            boxes.push_back({{b, batches}, {0, p.Hkv}, queries, keys});
            u += batches * p.Hkv;
        } else {
            const std::int64_t heads = std::min(p.Hkv - hk, u1 - u);
            boxes.push_back({{b, 1}, {hk, heads}, queries, keys});
            u += heads;
        }
    }
    return boxes;
}

}  // namespace

AttentionReport attention(std::span<Context* const> contexts, const AttentionInputs& inputs,
                          const AttentionOutputs& outputs, const AttentionOptions& options) {
    if (contexts.empty()) throw InvalidArgument("contexts", "at least one context is needed.");
    for (std::size_t d = 0; d < contexts.size(); ++d)
        if (contexts[d] == nullptr)
            throw InvalidArgument("contexts", "context " + std::to_string(d) + " is null.");
    const detail::Problem whole = detail::resolve(inputs, outputs, options);
    const std::int64_t units = whole.B * whole.Hkv;
    const auto devices = static_cast<std::int64_t>(contexts.size());

    // Each context's blocks, their inputs built (masks copied) and checked before any runs: a bad
    // argument leaves the outputs untouched.
    struct Share {
        std::vector<BlockBox> boxes;
        std::vector<std::unique_ptr<detail::BlockInputs>> blocks;  // one per box (not copyable: spans into it)
        std::vector<AttentionReport> reports;
        std::exception_ptr error;
    };
    std::vector<Share> shares(contexts.size());
    for (std::int64_t d = 0; d < devices; ++d) {
        Share& share = shares[static_cast<std::size_t>(d)];
        share.boxes = blocks_of(units * d / devices, units * (d + 1) / devices, whole);
        for (const BlockBox& box : share.boxes) {
            share.blocks.push_back(std::make_unique<detail::BlockInputs>(whole, inputs, options, box));
            const detail::BlockInputs& block = *share.blocks.back();
            (void)detail::resolve(block.inputs, detail::block_outputs(whole, outputs, box), block.options);
        }
    }

    std::vector<std::thread> threads;
    for (std::size_t d = 0; d < shares.size(); ++d) {
        if (shares[d].boxes.empty()) continue;
        threads.emplace_back([&, d] {
            Share& share = shares[d];
            try {
                for (std::size_t i = 0; i < share.boxes.size(); ++i) {
                    const detail::BlockInputs& block = *share.blocks[i];
                    share.reports.push_back(attention(*contexts[d], block.inputs,
                                                      detail::block_outputs(whole, outputs, share.boxes[i]), block.options));
                }
            } catch (...) {
                share.error = std::current_exception();
            }
        });
    }
    for (std::thread& t : threads) t.join();
    for (const Share& share : shares)
        if (share.error) std::rethrow_exception(share.error);

    AttentionReport report;
    bool first = true;
    for (const Share& share : shares) {
        double gpu_ms = 0.0;
        for (const AttentionReport& r : share.reports) {
            if (first) {
                report = r;
                report.gpu_ms = report.flops = 0.0;
                report.slices = 0;
                report.device_bytes = 0;
                first = false;
            }
            gpu_ms += r.gpu_ms;
            report.flops += r.flops;
            report.slices += r.slices;
            report.device_bytes += r.device_bytes;
            if (r.product_type != DType::f32) report.product_type = r.product_type;  // any share's rounding is the call's
        }
        report.gpu_ms = std::max(report.gpu_ms, gpu_ms);
    }
    return report;
}

}  // namespace vkattn
