// MhaLayer: a multi-head attention layer's weights on the device, its forward pass over device
// tensors, and decode steps over a KV cache.
#include "vkattn/mha_layer.hpp"

#include <algorithm>
#include <functional>
#include <string>

#include "attention/io.hpp"
#include "attention/problem.hpp"
#include "mha/linear.hpp"
#include "mha/mha_layer_state.hpp"
#include "mha/mha_problem.hpp"
#include "context_state.hpp"
#include "plan/plan_state.hpp"
#include "runtime.hpp"
#include "submit/batch_state.hpp"
#include "tensor/storage.hpp"
#include "vkattn/context.hpp"
#include "vkattn/errors.hpp"
#include "vkattn/quantize.hpp"

namespace vkattn {
namespace detail {

std::vector<std::byte> in_dtype(const float* data, std::int64_t count, DType dtype) {
    std::vector<std::byte> bytes(static_cast<std::size_t>(count) * size_of(dtype));
    quantize_row(dtype, {data, static_cast<std::size_t>(count)},
                 {reinterpret_cast<std::uint8_t*>(bytes.data()), bytes.size()});  // rounded to nearest even
    return bytes;
}

MhaLayerState::MhaLayerState(Context& ctx, const MultiHeadAttention& layer, DType dt)
    : context(&ctx), runtime(&ContextAccess::runtime(ctx)), config(layer.config()), dtype(dt),
      head_dim(config.embed_dim / config.num_heads) {
    runtime->ensure_usable();
    if (dtype != DType::f32 && dtype != DType::f16 && dtype != DType::bf16)
        throw InvalidArgument("dtype", "the layer stores f32, f16 or bf16, not " + to_string(dtype) + ".");
    if (dtype != DType::f32) vk::require_fp16_storage(runtime->device().caps(), "dtype", dtype);
    Batch batch(ctx);
    for (int i = 0; i < 4; ++i) {
        const std::vector<float>& weight = layer.weight(i);
        const auto count = static_cast<std::int64_t>(weight.size());
        w[i] = DeviceTensor::empty(ctx, dtype, {1, 1, 1, count});
        const std::vector<std::byte> bytes = in_dtype(weight.data(), count, dtype);
        batch.upload(w[i], make_view(static_cast<const void*>(bytes.data()), dtype, Layout::bhnd, w[i].shape()));
        weight_bytes += TensorAccess::storage(w[i])->buffer.size();
        const std::vector<float>& bias = layer.bias(i);
        if (bias.empty()) continue;
        b[i] = DeviceTensor::empty(ctx, DType::f32, {1, 1, 1, static_cast<std::int64_t>(bias.size())});
        batch.upload(b[i], make_view(static_cast<const void*>(bias.data()), DType::f32, Layout::bhnd, b[i].shape()));
        weight_bytes += TensorAccess::storage(b[i])->buffer.size();
    }
    batch.submit().wait();
}

MhaLayerState::Scratch MhaLayerState::scratch(std::int64_t q_rows, std::int64_t kv_rows) const {
    std::lock_guard lock(scratch_mutex_);
    const std::int64_t E = config.embed_dim;
    const std::uint64_t eb = size_of(dtype);
    auto matrix = [&](std::int64_t r, const char* what) {
        return allocate_storage(*runtime, static_cast<std::uint64_t>(r * E) * eb, what);
    };
    if (q_rows > q_rows_) {
        scratch_.q = matrix(q_rows, "the layer's projected queries");
        scratch_.o = matrix(q_rows, "the layer's attention output");
        q_rows_ = q_rows;
    }
    if (kv_rows > kv_rows_) {
        scratch_.k = matrix(kv_rows, "the layer's projected keys");
        scratch_.v = matrix(kv_rows, "the layer's projected values");
        kv_rows_ = kv_rows;
    }
    return scratch_;
}

DeviceTensor MhaLayerState::rows(const std::shared_ptr<Storage>& storage, std::int64_t r, std::int64_t cols) const {
    const std::array<std::int64_t, 4> shape{1, 1, r, cols};
    return TensorAccess::make(storage, 0, dtype, shape, dense_strides(Layout::bhnd, shape));
}

DeviceTensor MhaLayerState::heads(const std::shared_ptr<Storage>& storage, std::int64_t N, std::int64_t T) const {
    return TensorAccess::make(storage, 0, dtype, {N, config.num_heads, T, head_dim},
                              mha_head_strides(config.batch_first, N, T, config.embed_dim, head_dim));
}

namespace {

std::int64_t hash_of(const std::string& text) { return static_cast<std::int64_t>(std::hash<std::string>{}(text)); }

// Keeps every tensor's memory alive until the batch's submission completes.
void keep_all(BatchState& batch, std::initializer_list<const DeviceTensor*> tensors) {
    for (const DeviceTensor* t : tensors)
        if (t->defined()) batch.keep(TensorAccess::storage(*t));
}

ProgramKey key_of(std::initializer_list<const DeviceTensor*> tensors, std::vector<std::int64_t> signature) {
    ProgramKey key;
    for (const DeviceTensor* t : tensors) {
        key.storages.push_back(t->defined() ? TensorAccess::storage(*t) : nullptr);
        key.offsets.push_back(t->defined() ? t->offset_bytes() : 0);
    }
    key.signature = std::move(signature);
    return key;
}

}  // namespace

AttentionReport record_forward(BatchState& batch, const std::shared_ptr<const MhaLayerState>& layer,
                               const MhaForward& c, bool cache, bool timed) {
    const MhaLayerState& l = *layer;
    Runtime& runtime = *l.runtime;
    const std::int64_t E = l.config.embed_dim, q_rows = c.L * c.N, kv_rows = c.S * c.N;
    const MhaLayerState::Scratch s = l.scratch(q_rows, kv_rows);
    const DeviceTensor q = l.rows(s.q, q_rows, E), k = l.rows(s.k, kv_rows, E), v = l.rows(s.v, kv_rows, E),
                       o = l.rows(s.o, q_rows, E);
    const DeviceAttentionInputs in{.q = l.heads(s.q, c.N, c.L), .k = l.heads(s.k, c.N, c.S),
                                   .v = l.heads(s.v, c.N, c.S), .bool_mask = c.bool_mask, .float_mask = c.float_mask};
    const DeviceAttentionOutputs out{.o = l.heads(s.o, c.N, c.L), .weights = c.weights};
    const AttentionSpec spec = spec_of(in, out, c.options);
    const std::shared_ptr<PlanState> core = ContextAccess::state(*l.context).plan(spec);

    const ProgramKey key = key_of({&c.x_q, &c.x_k, &c.x_v, &c.out, &q, &k, &v, &o, &c.bool_mask, &c.float_mask, &c.weights},
                                  {0, c.L, c.S, c.N, hash_of(spec.key())});
    std::shared_ptr<Program> program = cache ? l.programs.find(key) : nullptr;
    if (!program) {
        program = std::make_shared<Program>(runtime);
        auto bias = [&](int i) { return l.b[i].defined() ? &l.b[i] : nullptr; };
        using P = MultiHeadAttention::Projection;
        record_linear(*program, runtime, {&c.x_q, &l.w[P::q], bias(P::q), &q, q_rows, E, E});
        record_linear(*program, runtime, {&c.x_k, &l.w[P::k], bias(P::k), &k, kv_rows, l.config.kdim, E});
        record_linear(*program, runtime, {&c.x_v, &l.w[P::v], bias(P::v), &v, kv_rows, l.config.vdim, E});
        program->barrier();
        core->record(*program, in, out);
        program->barrier();
        record_linear(*program, runtime, {&o, &l.w[P::o], bias(P::o), &c.out, q_rows, E, E});
        if (cache) l.programs.insert(key, program);
    }
    const Storage& out_storage = *TensorAccess::storage(c.out);
    if (runtime.poison_outputs() && (out_storage.usage & VK_BUFFER_USAGE_TRANSFER_DST_BIT))
        vkCmdFillBuffer(batch.begin_op(), out_storage.buffer.get(), c.out.offset_bytes(), span_bytes(c.out) / 4 * 4,
                        nan_word(l.dtype));
    core->prepare(batch);
    const VkCommandBuffer commands = batch.begin_op();
    if (timed) batch.time_begin();
    program->replay(commands);
    if (timed) batch.time_end();
    batch.keep(program);
    batch.keep(core);
    core->keep_constants(batch);
    batch.keep(std::const_pointer_cast<MhaLayerState>(layer));
    keep_all(batch, {&c.x_q, &c.x_k, &c.x_v, &c.out, &q, &k, &v, &o, &c.bool_mask, &c.float_mask, &c.weights});
    return core->report;
}

namespace {

// An activation tensor checked against the layer: {1, d1, d2, features} where (d1, d2) is
// (T, N), or (N, T) batch first; dense, the layer's dtype, this context, bindable. Returns (T, N).
std::pair<std::int64_t, std::int64_t> activation(const MhaLayerState& l, const DeviceTensor& t, std::int64_t features,
                                                 const char* name) {
    storage_of(t, *l.runtime, name);
    if (t.dtype() != l.dtype)
        throw InvalidArgument(name, "its dtype is " + to_string(t.dtype()) + " but the layer's is " + to_string(l.dtype) + ".");
    const auto& sh = t.shape();
    const std::string form = l.config.batch_first ? "{1, N, T, " : "{1, T, N, ";
    if (sh[0] != 1 || sh[3] != features)
        throw InvalidArgument(name, "its shape is " + shape_text(sh) + " but the layer takes " + form +
                                        std::to_string(features) + "}.");
    if (!t.contiguous()) throw InvalidArgument(name, "it must be dense (a contiguous {1, d1, d2, features} tensor).");
    require_aligned_offset(t, binding_alignment(l.runtime->device().caps()), name);
    return l.config.batch_first ? std::pair{sh[2], sh[1]} : std::pair{sh[1], sh[2]};
}

// A dense {1, d1, d2, features} tensor as the [d1·d2, features] matrix the products read.
DeviceTensor flat(const DeviceTensor& t) {
    const std::array<std::int64_t, 4> shape{1, 1, t.shape()[1] * t.shape()[2], t.shape()[3]};
    return TensorAccess::make(TensorAccess::storage(t), t.offset_bytes(), t.dtype(), shape,
                              dense_strides(Layout::bhnd, shape));
}

// The forward pass over device activations, checked (shapes, dtype, batch and sequence agreement);
// its out left empty.
MhaForward forward_call(const MhaLayerState& l, const DeviceTensor& query, const DeviceTensor& key,
                        const DeviceTensor& value, const MhaLayerOptions& options) {
    const auto [L, N] = activation(l, query, l.config.embed_dim, "query");
    const auto [S, Nk] = activation(l, key, l.config.kdim, "key");
    const auto [Sv, Nv] = activation(l, value, l.config.vdim, "value");
    if (Nk != N) throw InvalidArgument("key", "its batch is " + std::to_string(Nk) + " but the query's is " + std::to_string(N) + ".");
    if (Sv != S || Nv != N)
        throw InvalidArgument("value", "its sequence and batch must be the key's (" + std::to_string(S) + ", " +
                                           std::to_string(N) + ").");
    MhaForward call{.x_q = flat(query), .x_k = flat(key), .x_v = flat(value), .L = L, .S = S, .N = N};
    call.options = {.causal = options.causal ? Causal::top_left : Causal::none, .impl = options.impl};
    return call;
}

void check_batch(const BatchState& batch, const MhaLayerState& l) {
    if (batch.runtime != l.runtime) throw InvalidArgument("batch", "the batch belongs to another Context than the layer.");
}

// A decode step over either cache: projections, append, attention over the cache, output projection.
template <class Cache>
void decode_over(const std::shared_ptr<const MhaLayerState>& layer, Batch& batch, Cache& cache, const DeviceTensor& x,
                 const DeviceTensor& out, Impl impl) {
    const MhaLayerState& l = *layer;
    BatchState& state = BatchAccess::state(batch);
    check_batch(state, l);
    const std::int64_t E = l.config.embed_dim, H = l.config.num_heads;
    const auto [T, N] = activation(l, x, E, "x");
    if (l.config.kdim != E || l.config.vdim != E)
        throw InvalidArgument("x", "decoding is self-attention: the layer's kdim and vdim must be embed_dim (they are " +
                                       std::to_string(l.config.kdim) + " and " + std::to_string(l.config.vdim) + ").");
    activation(l, out, E, "out");
    if (out.shape() != x.shape())
        throw InvalidArgument("out", "its shape is " + shape_text(out.shape()) + " but must be x's, " + shape_text(x.shape()) + ".");
    const auto& o = cache.options();
    if (o.batch != N || o.kv_heads != H || o.dim != l.head_dim || o.dim_v != l.head_dim || o.dtype != l.dtype)
        throw InvalidArgument("cache", "it holds " + std::to_string(o.batch) + " sequences of " + std::to_string(o.kv_heads) +
                                           " heads of " + std::to_string(o.dim) + "/" + std::to_string(o.dim_v) + " " +
                                           to_string(o.dtype) + "; this layer decodes " + std::to_string(N) +
                                           " sequences with " + std::to_string(H) + " heads of " +
                                           std::to_string(l.head_dim) + " " + to_string(l.dtype) + " (cache_options()).");
    Runtime& runtime = *l.runtime;
    const std::int64_t rows = T * N;
    const MhaLayerState::Scratch s = l.scratch(rows, rows);
    const DeviceTensor q = l.rows(s.q, rows, E), k = l.rows(s.k, rows, E), v = l.rows(s.v, rows, E),
                       o_rows = l.rows(s.o, rows, E);
    using P = MultiHeadAttention::Projection;
    auto bias = [&](int i) { return l.b[i].defined() ? &l.b[i] : nullptr; };
    auto replay = [&](const ProgramKey& key, const std::function<void(Program&)>& record) {
        const std::shared_ptr<Program> program = l.programs.find_or_record(key, runtime, record);
        program->replay(state.begin_op());
        state.keep(program);
    };
    // 1. q, k and v of the new tokens only.
    replay(key_of({&x, &q, &k, &v}, {1, T, N}), [&](Program& p) {
        record_linear(p, runtime, {&x, &l.w[P::q], bias(P::q), &q, rows, E, E});
        record_linear(p, runtime, {&x, &l.w[P::k], bias(P::k), &k, rows, E, E});
        record_linear(p, runtime, {&x, &l.w[P::v], bias(P::v), &v, rows, E, E});
    });
    // 2. Their keys and values into the cache, through head views of the projections.
    cache.append(batch, l.heads(s.k, N, T), l.heads(s.v, N, T));
    // 3. The new queries over the whole cache, each up to its own position.
    const DeviceAttentionInputs in = cache.inputs(l.heads(s.q, N, T));
    const DeviceAttentionOutputs core_out{.o = l.heads(s.o, N, T)};
    const AttentionOptions options{.causal = Causal::bottom_right, .impl = impl};
    ContextAccess::state(*l.context).plan(spec_of(in, core_out, options))->run(state, in, core_out, true);
    // 4. The output projection.
    replay(key_of({&o_rows, &out}, {2, T, N}), [&](Program& p) {
        record_linear(p, runtime, {&o_rows, &l.w[P::o], bias(P::o), &out, rows, E, E});
    });
    state.keep(std::const_pointer_cast<MhaLayerState>(layer));
    keep_all(state, {&x, &out, &q, &k, &v, &o_rows});
}

}  // namespace
}  // namespace detail

MhaLayer::MhaLayer(Context& context, const MultiHeadAttention& layer, DType dtype)
    : state_(std::make_shared<detail::MhaLayerState>(context, layer, dtype)) {}
MhaLayer::~MhaLayer() = default;
MhaLayer::MhaLayer(MhaLayer&&) noexcept = default;
MhaLayer& MhaLayer::operator=(MhaLayer&&) noexcept = default;

const MhaConfig& MhaLayer::config() const { return state_->config; }
DType MhaLayer::dtype() const { return state_->dtype; }
std::uint64_t MhaLayer::weight_bytes() const { return state_->weight_bytes; }

void MhaLayer::forward(Batch& batch, const DeviceTensor& query, const DeviceTensor& key, const DeviceTensor& value,
                       const DeviceTensor& out, const MhaLayerOptions& options) const {
    const detail::MhaLayerState& l = *state_;
    detail::BatchState& state = detail::BatchAccess::state(batch);
    detail::check_batch(state, l);
    detail::MhaForward call = detail::forward_call(l, query, key, value, options);
    detail::activation(l, out, l.config.embed_dim, "out");
    if (out.shape() != query.shape())
        throw InvalidArgument("out", "its shape is " + detail::shape_text(out.shape()) + " but must be the query's, " +
                                         detail::shape_text(query.shape()) + ".");
    call.out = detail::flat(out);
    detail::record_forward(state, state_, call, true, false);
}

void MhaLayer::backward(Batch& batch, const DeviceTensor& query, const DeviceTensor& key, const DeviceTensor& value,
                        const DeviceTensor& grad_out, const MhaLayerGradients& grads, const MhaLayerOptions& options) const {
    const detail::MhaLayerState& l = *state_;
    detail::BatchState& state = detail::BatchAccess::state(batch);
    detail::check_batch(state, l);
    const std::int64_t E = l.config.embed_dim;
    const detail::MhaForward forward = detail::forward_call(l, query, key, value, options);
    detail::activation(l, grad_out, E, "grad_out");
    if (grad_out.shape() != query.shape())
        throw InvalidArgument("grad_out", "its shape is " + detail::shape_text(grad_out.shape()) + " but must be out's, " +
                                              detail::shape_text(query.shape()) + ".");
    // An f32 gradient of `like`'s shape (or the given one), dense, bindable; or, for an input that is
    // an earlier one, none.
    auto gradient = [&](const DeviceTensor& g, const std::array<std::int64_t, 4>& shape, const char* name, bool wanted) {
        if (!wanted) {
            if (g.defined())
                throw InvalidArgument(name, "this input is an earlier one's tensor: its gradient is summed into that "
                                            "one's; leave it empty.");
            return;
        }
        if (!g.defined()) throw InvalidArgument(name, "the gradient is missing (every gradient is computed).");
        detail::storage_of(g, *l.runtime, name);
        if (g.dtype() != DType::f32 || g.shape() != shape || !g.contiguous())
            throw InvalidArgument(name, "must be f32, contiguous, of shape " + detail::shape_text(shape) + ".");
        detail::require_aligned_offset(g, detail::binding_alignment(l.runtime->device().caps()), name);
    };
    const bool key_own = !detail::same_tensor(key, query),
               value_own = !detail::same_tensor(value, query) && !detail::same_tensor(value, key);
    gradient(grads.query, query.shape(), "grads.query", true);
    gradient(grads.key, key.shape(), "grads.key", key_own);
    gradient(grads.value, value.shape(), "grads.value", value_own);
    const std::int64_t in_features[4] = {E, l.config.kdim, l.config.vdim, E};
    static const char* const weight_names[4] = {"grads.weight[q]", "grads.weight[k]", "grads.weight[v]", "grads.weight[out]"};
    static const char* const bias_names[4] = {"grads.bias[q]", "grads.bias[k]", "grads.bias[v]", "grads.bias[out]"};
    for (int i = 0; i < 4; ++i) {
        gradient(grads.weight[i], {1, 1, E, in_features[i]}, weight_names[i], true);
        gradient(grads.bias[i], {1, 1, 1, E}, bias_names[i], l.config.bias);
    }
    detail::MhaBackward call{.forward = forward, .grad_out = detail::flat(grad_out)};
    call.dx[0] = detail::flat(grads.query);
    if (key_own) call.dx[1] = detail::flat(grads.key);
    if (value_own) call.dx[2] = detail::flat(grads.value);
    for (int i = 0; i < 4; ++i) {
        call.dw[i] = grads.weight[i];
        call.db[i] = grads.bias[i];
    }
    detail::record_backward(state, state_, call);
}

void MhaLayer::decode(Batch& batch, KvCache& cache, const DeviceTensor& x, const DeviceTensor& out, Impl impl) const {
    detail::decode_over(state_, batch, cache, x, out, impl);
}

void MhaLayer::decode(Batch& batch, PagedKvCache& cache, const DeviceTensor& x, const DeviceTensor& out,
                      Impl impl) const {
    detail::decode_over(state_, batch, cache, x, out, impl);
}

KvCacheOptions MhaLayer::cache_options(std::int64_t batch, std::int64_t capacity) const {
    return {.batch = batch, .kv_heads = state_->config.num_heads, .capacity = capacity, .dim = state_->head_dim,
            .dim_v = state_->head_dim, .dtype = state_->dtype};
}

PagedKvCacheOptions MhaLayer::paged_cache_options(std::int64_t batch, std::int64_t num_blocks, std::int64_t block_size) const {
    return {.batch = batch, .kv_heads = state_->config.num_heads, .num_blocks = num_blocks, .block_size = block_size,
            .dim = state_->head_dim, .dim_v = state_->head_dim, .dtype = state_->dtype};
}

}  // namespace vkattn
