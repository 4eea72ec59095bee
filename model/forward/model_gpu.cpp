#include "model/forward/model_gpu.h"

#include "model/forward/stage_recorder.h"
#include "runtime/ops/norm.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

namespace vkllm {

void check_splittable(const ModelConfig& cfg, size_t n_devices) {
    if (n_devices > 1 &&
        (!cfg.arch->stack.lm_head || !cfg.arch->stack.encoder_arch.empty() || cfg.arch->attn.cross_attention))
        throw ModelConfigError(
            fmt::format("a {} model is not split over devices: only decoder-only models are", cfg.arch->name));
}

namespace {

// The options every stage of a split gets: checked stages, and one context for all of them.
ModelOptions stage_options(std::span<const ModelStage> stages, const GgufFile& file, const ModelConfig& cfg,
                           const ModelOptions& opts) {
    if (stages.empty()) throw std::invalid_argument("a model needs at least one device");
    uint32_t next = 0;
    for (size_t i = 0; i < stages.size(); ++i) {
        if (!stages[i].ctx) throw std::invalid_argument(fmt::format("stage {} has no device context", i));
        const LayerRange r = stages[i].layers.resolved(cfg);
        if (r.first != next || r.count == 0)
            throw std::invalid_argument(
                fmt::format("stage {} holds layers from {} ({} of them), but the next layer to "
                            "place is {}: stages hold contiguous, non-empty layer ranges",
                            i, r.first, r.count, next));
        next = r.end();
    }
    if (next != cfg.n_layers)
        throw std::invalid_argument(
            fmt::format("the stages hold layers 0-{} of the model's {}", next - 1, cfg.n_layers));
    check_splittable(cfg, stages.size());
    if (stages.size() == 1 || opts.n_ctx != 0) return opts;
    ModelOptions o = opts;
    o.n_ctx = UINT32_MAX;
    for (const ModelStage& st : stages)
        o.n_ctx = std::min(o.n_ctx, plan_memory(st.ctx->caps(), file, cfg, opts, st.layers.resolved(cfg)).n_ctx);
    return o;
}

// The stages of a model, each constructed (uploaded, compiled, allocated) before the next.
std::vector<std::unique_ptr<ForwardStage>> make_stages(std::span<const ModelStage> stages, const GgufFile& file,
                                                       const ModelConfig& cfg, const ModelOptions& opts,
                                                       const UploadProgress& progress) {
    if (opts.ubatch == 0) throw std::invalid_argument("ubatch must be > 0");
    if (opts.n_seq == 0) throw std::invalid_argument("n_seq must be > 0");
    if (cfg.arch->attn.cross_attention && opts.n_seq != 1)
        throw std::invalid_argument("an encoder-decoder model runs one sequence (n_seq 1)");
    // A sliding-window ring holds ubatch - 1 rows beyond the window: a verified draft is rolled back
    // within them (truncate), so a sequence's rows of a step must not exceed a ubatch.
    if (opts.draft_rows >= opts.ubatch)
        throw std::invalid_argument(fmt::format("{} drafted tokens per step need a ubatch of at least {} (--ubatch)",
                                                opts.draft_rows, opts.draft_rows + 1));
    // A split reports its upload over every stage's weights (every stage has opts.n_ctx, the one
    // context stage_options chose).
    StagePlace where{.alone = stages.size() == 1};
    if (!where.alone)
        for (const ModelStage& st : stages)
            where.total += plan_weights(file, cfg, opts.n_ctx, st.layers.resolved(cfg)).bytes;
    std::vector<std::unique_ptr<ForwardStage>> out;
    for (const ModelStage& st : stages) {
        out.push_back(std::make_unique<ForwardStage>(*st.ctx, file, cfg, opts, st.layers, where, progress));
        where.before += out.back()->weight_layout().bytes;
    }
    return out;
}

}  // namespace

void ModelGpu::check_seq(uint32_t seq, uint32_t n_seq) {
    if (seq >= n_seq)
        throw std::out_of_range(fmt::format("sequence {} does not exist (the model was loaded with {})", seq, n_seq));
}

ModelGpu::ModelGpu(Context& ctx, const GgufFile& file, const ModelConfig& cfg, const ModelOptions& opts,
                   const UploadProgress& progress)
    : ModelGpu(std::array{ModelStage{&ctx, {}}}, file, cfg, opts, progress) {}

ModelGpu::ModelGpu(std::span<const ModelStage> stages, const GgufFile& file, const ModelConfig& cfg,
                   const ModelOptions& opts, const UploadProgress& progress)
    : file_(file),
      cfg_(cfg),
      opts_(stage_options(stages, file, cfg, opts)),
      stages_(make_stages(stages, file, cfg_, opts_, progress)),
      pool_(stages_.front()->memory_plan().kv_budget / kKvBlockRows, kKvBlockRows, opts_.n_seq, n_ctx()),
      n_past_(opts_.n_seq, 0),
      rope_pos_(opts_.n_seq) {}

ModelGpu::~ModelGpu() = default;

void ModelGpu::set_encoder_output(std::span<const float> states, uint32_t n_rows) {
    if (!cfg_.arch->attn.cross_attention)
        throw std::logic_error(fmt::format("set_encoder_output: a {} model has no cross-attention", cfg_.arch->name));
    if (n_rows == 0 || n_rows > n_ctx())
        throw ContextFullError(
            fmt::format("{} encoder rows: the cross-attention holds 1..{} (the context)", n_rows, n_ctx()));
    if (states.size() != size_t(n_rows) * cfg_.dim)
        throw std::invalid_argument(
            fmt::format("set_encoder_output: {} floats for {} rows of {}", states.size(), n_rows, cfg_.dim));
    std::memcpy(step_inputs().enc.mapped(), states.data(), states.size() * 4);
    const uint32_t chunk = scratch_rows(opts_);
    ForwardStage& st = *stages_.front();  // an encoder-decoder is never split
    CommandStream s(st.context());
    s.begin();
    const StageRecorder rec(st);
    for (uint32_t r0 = 0; r0 < n_rows; r0 += chunk) rec.record_cross_kv(s, r0, std::min(chunk, n_rows - r0));
    s.end();
    s.submit_and_wait();
    auto* pos = static_cast<int32_t*>(step_inputs().cross_pos.mapped());
    for (uint32_t i = 0; i < scratch_rows(opts_); ++i) pos[i] = int32_t(n_rows - 1);
    n_enc_ = n_rows;
    n_past_[0] = 0;
}

void ModelGpu::eval(std::span<const int32_t> tokens, const LayerProbe& probe) {
    eval_impl(0, {.tokens = tokens}, probe, {});
}

void ModelGpu::require_head(const char* what) const {
    if (!cfg_.arch->stack.lm_head)
        throw std::logic_error(
            fmt::format("{}: a {} model has no LM head (read hidden_states())", what, cfg_.arch->name));
}

void ModelGpu::eval_all_logits(std::span<const int32_t> tokens, const LogitsSink& sink) {
    require_head("eval_all_logits");
    if (!opts_.all_logits)
        throw std::logic_error("eval_all_logits: the model was loaded without ModelOptions::all_logits");
    eval_impl(0, {.tokens = tokens}, {}, sink);
}

void ModelGpu::check_tokens(std::span<const int32_t> tokens) const {
    for (int32_t id : tokens)
        if (id < 0 || uint32_t(id) >= cfg_.n_vocab)
            throw std::out_of_range(fmt::format("token id {} outside the vocabulary (0..{})", id, cfg_.n_vocab - 1));
}

void ModelGpu::run(const StepShape& b, const LayerProbe& probe) {
    for (size_t i = 0; i < stages_.size(); ++i) {
        ForwardStage& st = *stages_[i];
        st.submit(st.recording(b), probe, b);
        if (b.v_of_layer && *b.v_of_layer < st.range().end()) break;  // eval_v: nothing after that layer
        if (i + 1 == stages_.size()) break;
        // The next stage reads the step's positions (and ids) as this one did, and its x from recv.
        const ForwardBuffers &from = st.buffers(), &to = stages_[i + 1]->buffers();
        auto pass = [](const Buffer& src, const Buffer& dst, size_t bytes) {
            std::memcpy(dst.mapped(), src.mapped(), bytes);
        };
        pass(from.positions, to.positions, 4ull * b.n);
        pass(from.rel_pos, to.rel_pos, 4ull * cfg_.pos_width() * b.n);
        pass(from.segs, to.segs, 8ull * b.n);
        pass(from.ids, to.ids, 4ull * b.n);
        pass(from.send, to.recv, 4ull * cfg_.dim * b.n);
        const size_t table_rows = b.decode_batch ? b.n : 1;
        pass(from.kv_tables, to.kv_tables, 4ull * table_rows * kv_blocks(n_ctx()));
        if (const uint32_t ring = st.ring_rows())
            pass(from.ring_tables, to.ring_tables, 4ull * table_rows * kv_blocks(ring));
    }
}

void ModelGpu::eval_impl(uint32_t seq, const StepInput& in, const LayerProbe& probe, const LogitsSink& sink) {
    const std::span<const int32_t> tokens = in.tokens;
    const bool rows_in = !in.rows.empty();
    if (rows_in && !tokens.empty()) throw std::logic_error("eval: tokens and embedding rows in one call");
    if (rows_in && in.rows.size() % cfg_.dim != 0)
        throw std::invalid_argument(
            fmt::format("eval_embeddings: {} floats are not whole rows of {}", in.rows.size(), cfg_.dim));
    const size_t total = rows_in ? in.rows.size() / cfg_.dim : tokens.size();
    if (total == 0) throw std::invalid_argument(rows_in ? "eval_embeddings: no rows" : "eval: no tokens");
    const bool at = !in.at.empty();  // eval_at: positions inside the sequence, and maybe after it
    if (!at && total > n_ctx() - n_past_[seq])
        throw ContextFullError(opts_.n_seq > 1
                                   ? fmt::format("{} tokens do not fit sequence {}: it holds {} tokens and {} are used",
                                                 total, seq, n_ctx(), n_past_[seq])
                                   : fmt::format("{} tokens do not fit: the context holds {} tokens and {} are used "
                                                 "(raise --ctx, or start a new conversation)",
                                                 total, n_ctx(), n_past_[seq]));
    // Tokens that see each other are one attention call: one chunk.
    if (in.bidirectional && total > opts_.ubatch)
        throw ContextFullError(
            fmt::format("{} embeddings that attend to each other (an image) do not fit one "
                        "batch of {} tokens (raise --ubatch)",
                        total, opts_.ubatch));
    check_tokens(tokens);
    check_bidirectional(cfg_, n_past_[seq], total, opts_.ubatch);
    if (cfg_.arch->attn.cross_attention && n_enc_ == 0)
        throw std::logic_error("eval: an encoder-decoder model needs the encoder's output first (set_encoder_output)");
    check_image_grid(in.grid, total);
    // Images a failed call registered past the sequence's end are not its own.
    rope_pos_[seq].truncate(n_past_[seq]);
    if (cfg_.places_images_by_grid() && !in.grid.empty()) rope_pos_[seq].add_image(n_past_[seq], in.grid);
    const uint32_t width = cfg_.pos_width();
    for (size_t done = 0; done < total;) {
        const uint32_t n = uint32_t(std::min<size_t>(opts_.ubatch, total - done));
        auto* pos = static_cast<int32_t*>(step_inputs().positions.mapped());
        auto* rel = static_cast<int32_t*>(step_inputs().rel_pos.mapped());
        auto* segs = static_cast<int32_t*>(step_inputs().segs.mapped());
        auto* ids = static_cast<int32_t*>(step_inputs().ids.mapped());
        for (uint32_t i = 0; i < n; ++i) {
            const uint32_t p = at ? in.at[done + i] : n_past_[seq] + i;
            pos[i] = int32_t(p);
            put_position(rel, width, i, rope_pos_[seq].at(p));
            ids[i] = rows_in ? 0 : tokens[done + i];
            segs[2 * i] = 0;  // bidirectional: one input, all of the call
            segs[2 * i + 1] = int32_t(n_past_[seq] + n);
        }
        if (rows_in)
            std::memcpy(step_inputs().embed_in.mapped(), in.rows.data() + done * cfg_.dim, size_t(n) * cfg_.dim * 4);
        // Shared blocks from the first row written on are copied before they are written into.
        if (at)
            hold_rows(seq, std::max(n_past_[seq], in.at[done + n - 1] + 1), in.at[done]);
        else
            hold_rows(seq, n_past_[seq] + n, n_past_[seq]);
        write_tables(0, seq);
        // One token sees the same keys either way: it takes the ordinary chunk's recording.
        run(
            StepShape{
                .n = n, .rows_in = rows_in, .bidirectional = in.bidirectional && n > 1, .v_of_layer = in.v_of_layer},
            probe);
        if (!in.v_of_layer) {  // a V-only chunk computes no logits: the last ones stay readable
            last_rows_ = 1;
            last_chunk_ = n;
        } else {
            const std::vector<float> v = stages_.front()->read_v(*in.v_of_layer, n);
            in.v_out->insert(in.v_out->end(), v.begin(), v.end());
        }
        n_past_[seq] = at ? std::max(n_past_[seq], in.at[done + n - 1] + 1) : n_past_[seq] + n;
        if (sink) {
            const size_t floats = size_t(n) * cfg_.n_vocab;
            const ForwardStage& head = head_stage();
            if (head.buffers().all_logits.mapped()) {
                sink(uint32_t(done), {static_cast<const float*>(head.buffers().all_logits.mapped()), floats});
            } else {
                std::vector<float> rows(floats);
                head.context().download(head.buffers().all_logits, rows.data(), floats * 4);
                sink(uint32_t(done), rows);
            }
        }
        done += n;
    }
}

void ModelGpu::eval_embeddings(uint32_t seq, std::span<const float> rows, bool bidirectional, ImageGrid grid) {
    check_seq(seq, opts_.n_seq);
    if (rows.empty()) throw std::invalid_argument("eval_embeddings: no rows");
    eval_impl(seq, {.rows = rows, .bidirectional = bidirectional, .grid = grid}, {}, {});
}

void ModelGpu::eval_packed(std::span<const std::span<const int32_t>> inputs) {
    if (cfg_.causal) throw std::logic_error("eval_packed: packing needs a bidirectional model (an encoder)");
    size_t total = 0;
    for (const auto& in : inputs) {
        if (in.empty()) throw std::invalid_argument("eval_packed: an input has no tokens");
        check_tokens(in);
        total += in.size();
    }
    if (inputs.empty()) throw std::invalid_argument("eval_packed: no inputs");
    if (total > opts_.ubatch || total > n_ctx())
        throw std::invalid_argument(
            fmt::format("eval_packed: {} tokens do not fit one ubatch of {}", total, std::min(opts_.ubatch, n_ctx())));
    const uint32_t n = uint32_t(total);
    auto* pos = static_cast<int32_t*>(step_inputs().positions.mapped());
    auto* rel = static_cast<int32_t*>(step_inputs().rel_pos.mapped());
    auto* segs = static_cast<int32_t*>(step_inputs().segs.mapped());
    auto* ids = static_cast<int32_t*>(step_inputs().ids.mapped());
    uint32_t at = 0;
    for (const auto& in : inputs) {
        const uint32_t begin = at, end = at + uint32_t(in.size());
        for (uint32_t i = 0; i < in.size(); ++i, ++at) {
            pos[at] = int32_t(at);  // cache row: the pack's
            put_position(rel, cfg_.pos_width(), at, RopePositions().at(i));  // RoPE / learned position: the input's own
            segs[2 * at] = int32_t(begin);
            segs[2 * at + 1] = int32_t(end);
            ids[at] = in[i];
        }
    }
    hold_rows(0, n, 0);
    write_tables(0, 0);
    rope_pos_[0].clear();
    run(StepShape{n, false}, {});
    last_rows_ = 1;
    last_chunk_ = n;
    n_past_[0] = n;
}

uint32_t ModelGpu::n_past(uint32_t seq) const {
    check_seq(seq, opts_.n_seq);
    return n_past_[seq];
}

void ModelGpu::reset(uint32_t seq) {
    check_seq(seq, opts_.n_seq);
    n_past_[seq] = 0;
    rope_pos_[seq].clear();
    hold_rows(seq, 0);
}

void ModelGpu::hold_rows(uint32_t seq, uint32_t rows, uint32_t write_from) {
    pool_.hold_rows(seq, rows, write_from, [&](uint32_t from, uint32_t to) {
        for (auto& st : stages_) st->copy_block(from, to);
    });
}

bool ModelGpu::share_prefix(uint32_t dst, uint32_t src, uint32_t n) {
    check_seq(dst, opts_.n_seq);
    check_seq(src, opts_.n_seq);
    if (n > n_past_[src])
        throw std::invalid_argument(
            fmt::format("share_prefix: {} tokens of sequence {}, which holds {}", n, src, n_past_[src]));
    if (stages_.front()->ring_rows() != 0 || dst == src) return false;
    reset(dst);
    pool_.share_prefix(dst, src, n);
    n_past_[dst] = n;
    rope_pos_[dst] = rope_pos_[src];
    rope_pos_[dst].truncate(n);
    return true;
}

uint32_t ModelGpu::kv_blocks_needed(uint32_t seq, uint32_t n) const {
    check_seq(seq, opts_.n_seq);
    return pool_.blocks_needed(seq, n_past_[seq], n);
}

KvUsage ModelGpu::kv_usage() const {
    KvUsage u;
    u.blocks_total = pool_.blocks_total();
    u.blocks_used = pool_.blocks_used();
    u.block_rows = pool_.block_rows();
    for (const auto& st : stages_) u.block_bytes += st->kv_block_bytes();
    return u;
}

void ModelGpu::write_tables(uint32_t row, uint32_t seq) {
    const std::span<const uint32_t> blocks = pool_.blocks(seq);
    std::memcpy(static_cast<uint32_t*>(step_inputs().kv_tables.mapped()) + size_t(row) * kv_blocks(n_ctx()),
                blocks.data(), blocks.size() * 4);
    if (const uint32_t ring = stages_.front()->ring_rows()) {  // a ring's blocks are its sequence's, fixed
        const uint32_t stride = kv_blocks(ring);
        auto* t = static_cast<uint32_t*>(step_inputs().ring_tables.mapped()) + size_t(row) * stride;
        for (uint32_t j = 0; j < stride; ++j) t[j] = seq * stride + j;
    }
}

bool ModelGpu::truncate(uint32_t seq, uint32_t n) {
    check_seq(seq, opts_.n_seq);
    const uint32_t old = n_past_[seq];
    if (n > old) throw std::invalid_argument(fmt::format("truncate: {} tokens kept of {}", n, old));
    // A ring of R rows holds position p until position p + R is stored. The next token (at n)
    // needs positions from n - window + 1 on, so the oldest of them must not have been overwritten.
    for (uint32_t l = 0; l < cfg_.n_layers; ++l) {
        const uint32_t rows = kv_cache_rows(cfg_, l, n_ctx(), opts_.ubatch);
        if (rows >= n_ctx()) continue;
        const uint32_t oldest = n + 1 > cfg_.window ? n + 1 - cfg_.window : 0;
        if (uint64_t(oldest) + rows < old) return false;
    }
    n_past_[seq] = n;
    rope_pos_[seq].truncate(n);
    hold_rows(seq, n);
    return true;
}

void ModelGpu::eval(uint32_t seq, std::span<const int32_t> tokens) {
    check_seq(seq, opts_.n_seq);
    eval_impl(seq, {.tokens = tokens}, {}, {});
}

void ModelGpu::decode(std::span<const SeqToken> batch) {
    if (batch.empty()) throw std::invalid_argument("decode: empty batch");
    if (cfg_.arch->attn.cross_attention && n_enc_ == 0)
        throw std::logic_error(
            "decode: an encoder-decoder model needs the encoder's output first (set_encoder_output)");
    if (batch.size() > decode_rows(opts_))
        throw std::invalid_argument(fmt::format("decode: {} rows, at most {} ({} sequences, {} drafts each)",
                                                batch.size(), decode_rows(opts_), opts_.n_seq - opts_.spare_seqs,
                                                opts_.draft_rows));
    // Each sequence's rows: one run of adjacent entries, at positions n_past, n_past + 1, ...
    std::vector<uint32_t> count(opts_.n_seq, 0);
    bool repeats = false;
    for (size_t i = 0; i < batch.size(); ++i) {
        const uint32_t seq = batch[i].seq;
        check_seq(seq, opts_.n_seq);
        if (count[seq] > 0 && batch[i - 1].seq != seq)
            throw std::invalid_argument(fmt::format("decode: the rows of sequence {} are not adjacent", seq));
        repeats = repeats || count[seq] > 0;
        if (++count[seq] > 1 + opts_.draft_rows)
            throw std::invalid_argument(
                fmt::format("decode: sequence {} has more than {} rows (1 + draft_rows)", seq, 1 + opts_.draft_rows));
        check_tokens(std::span<const int32_t>(&batch[i].token, 1));
    }
    for (uint32_t seq = 0; seq < opts_.n_seq; ++seq) {
        if (count[seq] == 0) continue;
        if (n_past_[seq] + count[seq] > n_ctx())
            throw ContextFullError(fmt::format("sequence {} holds {} of {} tokens: {} more do not fit", seq,
                                               n_past_[seq], n_ctx(), count[seq]));
        hold_rows(seq, n_past_[seq] + count[seq], n_past_[seq]);
    }
    const StepShape shape{.n = uint32_t(batch.size()), .decode_batch = batch.size() > 1, .repeats = repeats};
    auto* pos = static_cast<int32_t*>(step_inputs().positions.mapped());
    auto* ids = static_cast<int32_t*>(step_inputs().ids.mapped());
    auto* segs = static_cast<int32_t*>(step_inputs().segs.mapped());
    std::vector<uint32_t> next = n_past_;  // each sequence's next position
    for (size_t i = 0; i < batch.size(); ++i) {
        const SeqToken& t = batch[i];
        const uint32_t p = next[t.seq]++;
        write_tables(uint32_t(i), t.seq);
        pos[i] = int32_t(p);
        put_position(static_cast<int32_t*>(step_inputs().rel_pos.mapped()), cfg_.pos_width(), uint32_t(i),
                     rope_pos_[t.seq].at(p));
        segs[2 * i] = 0;  // bidirectional models: the token sees its sequence so far and itself
        segs[2 * i + 1] = pos[i] + 1;
        ids[i] = t.token;
    }
    run(shape, {});
    last_rows_ = shape.n;
    for (uint32_t seq = 0; seq < opts_.n_seq; ++seq) n_past_[seq] += count[seq];
}

void ModelGpu::read_logits(uint32_t rows, float* dst) const {
    require_head("read_logits");
    if (rows == 0 || rows > last_rows_)
        throw std::out_of_range(fmt::format("read_logits: {} rows, the last evaluation made {}", rows, last_rows_));
    const ForwardStage& head = head_stage();
    head.context().download(head.buffers().logits.slice(0, 4ull * rows * cfg_.n_vocab), dst,
                            4ull * rows * cfg_.n_vocab);
}

std::string non_finite_message(float value, int64_t token, uint32_t position) {
    const std::string which = token >= 0 ? fmt::format(" ({} for token {})", value, token) : std::string();
    return fmt::format(
        "the model produced non-finite logits{} at position {}: its weights hold NaN or Inf values, or "
        "the computation overflowed",
        which, position);
}

std::vector<int32_t> ModelGpu::argmax_rows(uint32_t rows) const {
    require_head("argmax_rows");
    if (rows == 0 || rows > last_rows_)
        throw std::out_of_range(fmt::format("argmax_rows: {} rows, the last evaluation made {}", rows, last_rows_));
    const ForwardStage& head = head_stage();
    std::vector<uint32_t> ids(rows);
    std::memcpy(ids.data(), head.buffers().argmax.mapped(), 4ull * rows);
    std::vector<int32_t> out(rows);
    for (uint32_t r = 0; r < rows; ++r) {
        // The device argmax skips NaN and answers 0 for an all-NaN row: the winning logit itself tells.
        float best = 0;
        if (ids[r] < cfg_.n_vocab) {
            if (head.buffers().logits.mapped())
                std::memcpy(&best,
                            static_cast<const uint8_t*>(head.buffers().logits.mapped()) +
                                4ull * (uint64_t(r) * cfg_.n_vocab + ids[r]),
                            4);
            else
                head.context().download(head.buffers().logits.slice(4ull * (uint64_t(r) * cfg_.n_vocab + ids[r]), 4),
                                        &best, 4);
        }
        out[r] = ids[r] < cfg_.n_vocab && std::isfinite(best) ? int32_t(ids[r]) : -1;
    }
    return out;
}

void ModelGpu::set_profiling(bool on) {
    for (auto& st : stages_) st->set_profiling(on);
}

std::vector<DispatchTiming> ModelGpu::last_timings() const {
    std::vector<DispatchTiming> out;
    for (const auto& st : stages_) {
        auto t = st->last_timings();
        out.insert(out.end(), t.begin(), t.end());
    }
    return out;
}

ForwardStats ModelGpu::stats() const {
    // Tokens once: every stage evaluates the same ones.
    ForwardStats s = stages_.front()->stats();
    for (size_t i = 1; i < stages_.size(); ++i) {
        s.recordings += stages_[i]->stats().recordings;
        s.submits += stages_[i]->stats().submits;
    }
    return s;
}

std::vector<ModelGpu::StageInfo> ModelGpu::stages() const {
    std::vector<StageInfo> out;
    for (const auto& st : stages_)
        out.push_back({&st->context().caps(), st->range(), &st->memory_plan(), &st->weight_layout()});
    return out;
}

int32_t ModelGpu::argmax() const {
    require_head("argmax");
    const ForwardStage& head = head_stage();
    uint32_t id = 0;
    std::memcpy(&id, head.buffers().argmax.mapped(), 4);
    // The device argmax skips NaN and answers 0 for an all-NaN row, so check the winning logit
    // itself: a 4-byte read where the logits are mapped; elsewhere a read costs a submit, so only
    // the all-NaN answer (0) is checked.
    float best = 0;
    if (head.buffers().logits.mapped())
        std::memcpy(&best, static_cast<const uint8_t*>(head.buffers().logits.mapped()) + 4ull * id, 4);
    else if (id == 0)
        head.context().download(head.buffers().logits, &best, 4);
    if (id >= cfg_.n_vocab || !std::isfinite(best)) throw NonFiniteError(non_finite_message(best, id, n_past_[0]));
    return int32_t(id);
}

void check_bidirectional(const ModelConfig& cfg, uint32_t n_past, size_t n_tokens, uint32_t ubatch) {
    if (cfg.causal) return;
    if (n_past != 0)
        throw std::logic_error("a bidirectional model attends over one whole input: reset() before each input");
    if (n_tokens > ubatch)
        throw ContextFullError(
            fmt::format("{} tokens: a bidirectional model attends over its whole input in one "
                        "ubatch, and the ubatch holds {} (load it with a larger ubatch, up to the "
                        "context)",
                        n_tokens, ubatch));
}

std::vector<float> ModelGpu::hidden_states() const {
    std::vector<float> out(size_t(last_chunk_) * cfg_.dim);
    if (out.empty()) return out;
    const ForwardStage& head = head_stage();
    head.context().download(head.buffers().x.slice(0, out.size() * 4), out.data(), out.size() * 4);
    if (!head.weight_layout().output_norm.present()) return out;
    // A decoder's states as its head reads them, and T5's encoder's: output_norm (with its bias for
    // LayerNorm models).
    const std::vector<float> w = read_place_f32(file_, head.weight_layout().output_norm),
                             b = read_place_f32(file_, head.weight_layout().output_norm_b);
    if (cfg_.arch->norm.kind == NormKind::Layer)
        ref::layer_norm(out.data(), w.data(), b.empty() ? nullptr : b.data(), out.data(), last_chunk_, cfg_.dim,
                        cfg_.norm_eps);
    else
        ref::rms_norm(out.data(), w.data(), out.data(), last_chunk_, cfg_.dim, cfg_.norm_eps);
    return out;
}

std::vector<float> ModelGpu::logits() const {
    require_head("logits");
    std::vector<float> out(cfg_.n_vocab);
    const ForwardStage& head = head_stage();
    head.context().download(head.buffers().logits, out.data(), out.size() * 4);
    return out;
}

bool ModelGpu::int_dot_matvecs() const {
    const StepShape lone{1, false};
    for (const auto& st : stages_)
        if (st->int_dot_layers(lone)) return true;
    const ForwardStage& last = head_stage();
    return cfg_.arch->stack.lm_head &&
           plan_head(last.context().caps(), cfg_, last.weight_layout(), lone, opts_.all_logits).out.int_dot();
}

bool ModelGpu::int_dot_matmuls() const {
    if (opts_.ubatch <= 1) return false;
    for (const auto& st : stages_)
        if (st->int_dot_layers({opts_.ubatch, false})) return true;
    return false;
}

}  // namespace vkllm
