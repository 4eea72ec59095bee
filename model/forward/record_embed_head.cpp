#include "model/forward/stage_recorder.h"

#include "runtime/ops/elementwise.h"
#include "runtime/ops/get_rows.h"
#include "runtime/ops/linear.h"
#include "runtime/ops/norm.h"
#include "runtime/ops/sampling_ops.h"

#include <cmath>

namespace vkllm {

void StageRecorder::record_embed(CommandStream& s, const StepShape& b) const {
    const uint32_t n = b.n;
    const uint64_t row = uint64_t(cfg_.dim) * 4;
    const BufferSlice x = b_.x.slice(0, row * n);
    if (st_.gpu_embed() && !b.rows_in)
        ops::get_rows(ctx_, s, w_.token_embd.type, w_.token_embd.slice(), cfg_.n_vocab, cfg_.dim,
                      b_.ids.slice(0, 4ull * n), n, x);
    else
        s.copy(b_.embed_in.slice(0, row * n), x);
    // Rows given as embeddings (an image's) are not scaled, as llama.cpp scales only looked-up ones.
    if (cfg_.arch->norm.embed_scale && !b.rows_in) ops::scale(ctx_, s, x, n * cfg_.dim, std::sqrt(float(cfg_.dim)));
    if (cfg_.arch->attn.positions == PositionKind::Learned) {
        // x += position_embd[pos]: the positions buffer doubles as the row ids.
        const BufferSlice rows = b_.tmp.slice(0, row * n);
        ops::get_rows(ctx_, s, w_.position_embd.type, w_.position_embd.slice(), w_.position_embd.rows, cfg_.dim,
                      b_.rel_pos.slice(0, 4ull * n), n, rows);
        ops::add(ctx_, s, x, rows, x, n * cfg_.dim);
    }
    // Encoders: x += token_types[0] (every token is of type 0), then x = norm(x).
    if (w_.token_types.present()) {
        const BufferSlice type0{w_.token_types.view.buffer, w_.token_types.view.offset, row};
        ops::add_rows(ctx_, s, x, type0, n, cfg_.dim);
    }
    if (w_.embd_norm.present()) norm(s, x, w_.embd_norm, w_.embd_norm_b, x, n);
}

void StageRecorder::record_logits(CommandStream& s, const HeadPlan& h, const BufferSlice& x, const BufferSlice& normed,
                                  const BufferSlice& logits) const {
    const DeviceTensor& out = w_.output_tensor();
    if (h.fold_norm) {  // logits = output · rms_norm(x), the norm in the matvec
        ops::linear(ctx_, s, h.out, out.slice(), x, logits, nullptr, nullptr,
                    with_q8(h.out, rms_input(w_.output_norm), nullptr));
    } else {
        norm(s, x, w_.output_norm, w_.output_norm_b, normed, h.rows);
        ops::linear(ctx_, s, h.out, out.slice(), normed, logits, nullptr, nullptr, with_q8(h.out, {}, nullptr));
    }
    if (cfg_.final_softcap > 0) ops::softcap(ctx_, s, logits, h.rows * cfg_.n_vocab, cfg_.final_softcap);
}

void StageRecorder::record_head(CommandStream& s, const StepShape& batch) const {
    const uint32_t n = batch.n;
    const uint64_t row = uint64_t(cfg_.dim) * 4;
    const uint64_t vrow = uint64_t(cfg_.n_vocab) * 4;
    const HeadPlan h = plan_head(ctx_.caps(), cfg_, st_.weight_layout(), {n, batch.decode_batch}, opts_.all_logits);
    if (batch.decode_batch) {
        // Every row is a sequence's last token: n rows of logits, one argmax each.
        const BufferSlice rows = b_.logits.slice(0, vrow * n);
        record_logits(s, h, b_.x.slice(0, row * n), b_.xn.slice(0, row * n), rows);
        ops::argmax(ctx_, s, rows, b_.argmax.slice(0, 4ull * n), n, cfg_.n_vocab);
        return;
    }
    const BufferSlice logits = b_.logits.slice(0, vrow);
    if (opts_.all_logits) {
        // Every token's logits (perplexity); a decode step's as a decode batch's. xn is free once the
        // last layer has run. The last row is copied to the logits buffer so that logits() and
        // argmax() see the same values as the rows.
        record_logits(s, h, b_.x.slice(0, row * n), b_.xn.slice(0, row * n), b_.all_logits.slice(0, vrow * n));
        s.copy(b_.all_logits.slice(vrow * (n - 1), vrow), logits);
    } else {
        // Only the last token's logits are needed: x's last row is read in place (linear binds
        // windows), as a decode step's.
        record_logits(s, h, b_.x.slice(row * (n - 1), row), b_.last.slice(), logits);
    }
    ops::argmax(ctx_, s, logits, b_.argmax.slice(0, 4), 1, cfg_.n_vocab);
}

}  // namespace vkllm
