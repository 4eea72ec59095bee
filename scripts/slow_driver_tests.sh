# shellcheck shell=bash
# Sourced by scripts/arm64.sh and scripts/test.sh: the test selection for drivers that compile our
# kernels one to two orders of magnitude slower than the system's Mesa 22.3 lavapipe on x86-64 —
# arm64 lavapipe under qemu (LLVM itself runs emulated) and Mesa 25 lavapipe (LLVM 15's coroutine
# splitting, llvm::coro::buildCoroutineFrame, dominates its compile time). There a cold shader cache
# makes the whole suite take hours; stage 1 of scripts/test.sh (Mesa 22.3) runs every case.
#
# Every test executable still runs; every weight type runs through the short-row matvec and the
# CPU-tuned (broadcast) matmul, and every KV type through attention and the K/V store, at tiny and
# unaligned shapes (the tiled matmul is the GPU-tuned variant's: stages 1, 2 and 4). Left out:
#   - the test cases below: real model sizes, the matvec and matmul splits of weights past
#     maxStorageBufferRange, matvec's and matmul's odd-shape sweeps, the batch sweep, linear()'s
#     choice between matvec and matmul (host logic that compiles both for every type), and the
#     forward-pass sweeps over every weight type and mixed files (each compiles every matvec and
#     matmul pipeline again at real layer geometry), and the sweeps of the fused input ops and of
#     the bias epilogue over every weight type (type-independent code around the dequantization
#     that matvec's and matmul's tiny shapes run for every type; their other cases still run), and
#     the forward pass under --caps int-dot (its own contexts compile every pipeline twice; the
#     integer-dot kernels' tests still run), and the mixture-of-experts matvec's sweep over every
#     weight type (with its SwiGLU and one-expert cases), its gpt-oss case (biases, clamped SwiGLU,
#     a 141 MB MXFP4 stack) and its real-size case, and the grouped prefill matmul's sweep over every
#     weight type (the window cases, the router and the combine still run, and the MoE
#     architectures, gpt-oss's included, in test_architectures, which prefill grouped and decode per slot);
#   - attention's GQA-ratio sweeps (GQA still runs in the store, sinks, ALiBi and narrower-V cases)
#     and the K/V store's sliding-window rings (the window decode and prefill cases and the gemma and
#     gpt-oss forward passes still run windows): on Mesa 25 with a cold shader cache these four
#     cases took 313 of the 739 s the attention files' cases spent (2026-12-04);
#   - the two weakened device variants (--caps ...), each of which compiles every pipeline again,
#     and the cases that open weakened devices of their own ('*on weakened devices*');
#   - the embedding comparisons with llama.cpp and the C API's vkllm_embed (processes of their own
#     that compile an encoder's pipelines for three files; stage 1 runs them, and the encoders'
#     kernels and forward pass run here in test_attention_prefill and test_architectures), and the
#     perplexity comparisons with llama.cpp over every fixture file (a vkllm process per file, 37
#     of them: 275 s under the sanitizers; stage 1 runs them, and every architecture's forward pass
#     runs here against the host reference in test_architectures).
# scripts/test.sh runs its stages at other subgroup sizes and its sanitizer stage with this list of
# cases too (there the cost is compiling again, or lavapipe time under the sanitizers), with their
# own VKLLM_TEST_DEVICE_VARIANTS.
# VKLLM_TEST_CASE_EXCLUDE is doctest's --test-case-exclude (tests/support/doctest_main.cpp): a
# comma-separated list, so a comma in a name is matched with `?`.
slow_driver_excluded_cases=(
  '*LLaMA 32/8*' '*LLaMA sizes*' '*LLaMA heads*' 'kv_store: LLaMA shapes*' '*real LLaMA*'
  '*real vocabularies*' '*real shapes*' '*real model shapes*' 'softmax: vocabulary sizes*' '*model sizes*' '*Gemma-like*'
  '*GPT-2 / Qwen2-size*' '*larger than maxStorageBufferRange*' 'matvec: odd shapes*' 'matmul: odd shapes*'
  '*batches of 2..8*'
  '*plans fit every device variant*' '*m <= 8 takes matvec*'
  '*at real layer shapes*' 'forward: mixed-type files*'
  'matvec fused input: every weight type*' 'linear bias: matvec? every weight type*'
  'linear bias: matmul? every weight type*' 'forward: integer-dot*' '*on weakened devices*'
  'embed: vkllm embed equals llama-server*' 'capi: vkllm_embed*'
  'architectures: vkllm perplexity matches llama-perplexity*'
  'moe_matvec: Qwen3-30B-A3B-sized*' 'moe_matvec: only the chosen experts* rows? every weight type'
  'moe_matvec: gpt-oss*' 'moe_matmul: a prefill chunk grouped*'
  'attention decode: GQA*' 'attention prefill: GQA*' 'attention window: GQA*' 'attention_store: sliding windows*'
)
VKLLM_TEST_CASE_EXCLUDE=$(IFS=,; echo "${slow_driver_excluded_cases[*]}")
VKLLM_TEST_DEVICE_VARIANTS=real  # tests/support/test_context.h
export VKLLM_TEST_CASE_EXCLUDE VKLLM_TEST_DEVICE_VARIANTS
