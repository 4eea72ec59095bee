#!/usr/bin/env python3
"""Folds the raw outputs of device_check.sh into OUT/summary.json and OUT/summary.txt.

usage: check_summary.py WORK OUT SECONDS QUICK
WORK holds devices.json, nvidia-smi.csv, tests/results ("name exit-status" per line), bench/vk.N.json
(`vkllm bench --json`), bench/peer.N.json (`llama-bench -o json`), bench/schema.json (`vkllm bench
--json-schema-file`), bench/vision.json (`vkllm bench --mmproj --image`), bench/speculative.json (`vkllm bench --lookup`), bench/blend.json (`vkllm bench-blend`) and bench/ops.json (`vkllm bench-ops --json`). Missing pieces are reported as missing, never invented.
"""
import json
import os
import sys


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def main():
    work, out, seconds, quick = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "1"
    s = {"seconds": seconds, "quick": quick}

    smi = os.path.join(work, "nvidia-smi.csv")
    if os.path.exists(smi):
        s["nvidia_smi"] = open(smi).read().strip()

    tests = []
    results = os.path.join(work, "tests", "results")
    if os.path.exists(results):
        for line in open(results):
            parts = line.split()
            if len(parts) != 2 or not parts[1].isdigit():
                continue  # a line cut short by a killed job
            name, rc = parts
            tests.append({"test": name, "exit": int(rc), "timed_out": rc in ("124", "137")})
    tests.sort(key=lambda t: t["test"])
    s["tests_run"] = len(tests)
    s["tests_failed"] = sum(1 for t in tests if t["exit"] != 0)
    s["failed"] = [t for t in tests if t["exit"] != 0]

    bench = []
    device = None
    n = 1
    while os.path.exists(os.path.join(work, "bench", f"vk.{n}.json")) or os.path.exists(
            os.path.join(work, "bench", f"peer.{n}.json")):
        vk = load(os.path.join(work, "bench", f"vk.{n}.json"))
        peer = load(os.path.join(work, "bench", f"peer.{n}.json"))
        row = {}
        if vk and vk.get("results"):
            device = device or vk.get("device")
            r = vk["results"][0]
            row["model"] = os.path.basename(r.get("model", "?"))
            for k in ("weight_type", "pp_tokens", "tg_tokens", "pp_tps_mean", "pp_tps_stddev", "tg_tps_mean",
                      "tg_tps_stddev", "decode_roofline_pct", "prefill_roofline_pct", "prefill_roofline", "load_ms",
                      "ttft_cold_pipeline_cache_ms", "ttft_warm_pipeline_cache_ms", "weights_bytes",
                      "decode_bytes_per_token"):
                if k in r:
                    row[k] = r[k]
        if isinstance(peer, list):
            for p in (x for x in peer if isinstance(x, dict)):
                key = "peer_pp_tps" if p.get("n_gen", 0) == 0 else "peer_tg_tps"
                row[key] = p.get("avg_ts")
                row[key + "_stddev"] = p.get("stddev_ts")
                row.setdefault("model", os.path.basename(p.get("model_filename", "")))
                row["peer_build"] = f'{p.get("build_commit", "")} ({p.get("build_number", "")})'
                row["peer_backend"] = p.get("backends", "")
                row["peer_gpu"] = p.get("gpu_info", "")
        for ours, theirs, ratio in (("pp_tps_mean", "peer_pp_tps", "pp_ratio"), ("tg_tps_mean", "peer_tg_tps", "tg_ratio")):
            if row.get(ours) and row.get(theirs):
                row[ratio] = row[ours] / row[theirs]
        bench.append(row)
        n += 1
    s["device"] = device
    s["bench"] = bench

    schema = load(os.path.join(work, "bench", "schema.json"))
    if schema and schema.get("results"):
        r = schema["results"][0]
        s["constrained"] = {"model": os.path.basename(r.get("model", "?"))}
        for k in ("tg_sampled_tps_mean", "tg_schema_tps_mean", "tg_schema_ratio", "tg_schema_tokens_mean",
                  "tg_sampled_sample_ms_per_token", "tg_schema_sample_ms_per_token"):
            if k in r:
                s["constrained"][k] = r[k]

    # Speculative decoding (device_check.sh step 3e).
    spec = load(os.path.join(work, "bench", "speculative.json"))
    if spec and spec.get("results") and spec["results"][0].get("speculation"):
        r = spec["results"][0]
        s["speculation"] = dict(r["speculation"], model=os.path.basename(r.get("model", "")))
    # CacheBlend (device_check.sh step 3f).
    blend = load(os.path.join(work, "bench", "blend.json"))
    if blend and "ttft_full_ms" in blend:
        s["blend"] = dict(blend, model=os.path.basename(blend.get("model", "")))
    # The image encode (device_check.sh step 3d).
    vision = load(os.path.join(work, "bench", "vision.json"))
    if vision and vision.get("results") and vision["results"][0].get("vision"):
        v = vision["results"][0]["vision"]
        im = (v.get("images") or [{}])[0]
        s["vision"] = {"projector": v.get("projector"), "vit": v.get("vit")}
        for k in ("width", "height", "tiles", "patches", "image_tokens", "encode_ms", "encode_ms_min", "encode_ms_max",
                  "encode_warmup_ms", "vit_gflop", "vit_gflop_per_s"):
            if k in im:
                s["vision"][k] = im[k]

    ops = load(os.path.join(work, "bench", "ops.json"))
    if ops:
        s["bench_ops"] = {"shapes": ops.get("shapes"), "probes": ops.get("probes"), "failed": ops.get("failed"),
                          "results": [{k: r.get(k) for k in ("op", "shape", "type", "status", "best_us", "gbs",
                                                              "bw_pct", "gflops", "peak_pct", "peak", "note") if k in r}
                                      for r in ops.get("results", [])]}

    # The other matvec path (device_check.sh step 5): bench rows alt.N.json beside vk.N.json.
    alt_caps = None
    try:
        with open(os.path.join(work, "bench", "alt_caps")) as f:
            alt_caps = f.read().strip()
    except OSError:
        pass
    alt_rows = []
    for i in range(1, n):
        a = load(os.path.join(work, "bench", f"alt.{i}.json"))
        if a and a.get("results") and i - 1 < len(bench):
            r = a["results"][0]
            alt_rows.append({"model": bench[i - 1].get("model"), "pp_tps": bench[i - 1].get("pp_tps_mean"),
                             "tg_tps": bench[i - 1].get("tg_tps_mean"), "alt_pp_tps": r.get("pp_tps_mean"),
                             "alt_tg_tps": r.get("tg_tps_mean")})
    ops_alt = load(os.path.join(work, "bench", "ops_alt.json"))
    if alt_caps:
        s["alt"] = {"caps": alt_caps, "bench": alt_rows,
                    "bench_ops": [{k: r.get(k) for k in ("op", "shape", "type", "status", "best_us", "gbs", "bw_pct", "gflops")
                                   if k in r} for r in (ops_alt or {}).get("results", [])]}

    sid_rows = []
    n = 1
    while os.path.exists(os.path.join(work, "bench", f"vkub.{n}.json")) or os.path.exists(
            os.path.join(work, "bench", f"sid.{n}.json")):
        vk = load(os.path.join(work, "bench", f"vkub.{n}.json"))
        peer = load(os.path.join(work, "bench", f"sid.{n}.json"))
        row = {}
        if vk and vk.get("results"):
            r = vk["results"][0]
            row["model"] = os.path.basename(r.get("model", "?"))
            row["pp_tps"], row["tg_tps"] = r.get("pp_tps_mean"), r.get("tg_tps_mean")
        if isinstance(peer, list):
            for p in (x for x in peer if isinstance(x, dict)):
                fa = 1 if p.get("flash_attn") in (1, True, "1", "on", "true") else 0
                row["ubatch"] = p.get("n_ubatch")
                row[f"peer_{'pp' if p.get('n_gen', 0) == 0 else 'tg'}_fa{fa}"] = p.get("avg_ts")
                row.setdefault("model", os.path.basename(p.get("model_filename", "?")))
        for ours, kind in (("pp_tps", "pp"), ("tg_tps", "tg")):
            best = max((v for v in (row.get(f"peer_{kind}_fa0"), row.get(f"peer_{kind}_fa1")) if v), default=None)
            if row.get(ours) and best:
                row[f"{kind}_ratio"] = row[ours] / best
        sid_rows.append(row)
        n += 1
    if sid_rows:
        s["llama_sid"] = {"packages": open(os.path.join(work, "bench", "sid.version")).read().strip()
                          if os.path.exists(os.path.join(work, "bench", "sid.version")) else None,
                          "matrix_cores": open(os.path.join(work, "bench", "sid.matrix")).read().strip()
                          if os.path.exists(os.path.join(work, "bench", "sid.matrix")) else None,
                          "rows": sid_rows}

    tune = load(os.path.join(work, "bench", "tune.json"))
    if isinstance(tune, dict):
        shapes = tune.get("shapes") or []
        s["tune"] = {"seconds": tune.get("seconds"), "entries": tune.get("entries"), "file": tune.get("file"),
                     "shapes": len(shapes), "improved": sum(1 for x in shapes if x.get("improved")),
                     "skipped": len(tune.get("skipped") or []), "results": shapes}
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(s, f, indent=1)

    def fmt(v, spec=".1f"):
        return "-" if v is None else format(v, spec)

    lines = [f"vkllm device check ({'quick' if quick else 'full'}), {seconds} s"]
    if device:
        lines.append(f"device: {device.get('name')} ({device.get('driver')}), read bandwidth "
                     f"{fmt(device.get('bandwidth_gb_s'))} GB/s, f32 FMA {fmt(device.get('fma_gflop_s'))} GFLOP/s"
                     + (f", int8 packed dot {fmt(device.get('int_dot_gop_s'))} GOP/s" if device.get('int_dot_gop_s') else ""))
    if "nvidia_smi" in s:
        lines.append("nvidia-smi: " + s["nvidia_smi"].replace("\n", " | "))
    lines.append(f"tests: {s['tests_run'] - s['tests_failed']} of {s['tests_run']} passed" +
                 "".join(f"\n  FAILED {t['test']} (exit {t['exit']}{', time limit' if t['timed_out'] else ''})"
                         for t in s["failed"]))
    lines.append("")
    lines.append("| model | type | vkllm pp t/s | llama.cpp pp t/s | pp ratio | vkllm tg t/s | llama.cpp tg t/s | tg ratio "
                 "| tg % BW roofline | pp % FMA or int8 dot | TTFT cold / warm ms |")
    lines.append("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in bench:
        lines.append(f"| {r.get('model', '?')} | {r.get('weight_type', '-')} | {fmt(r.get('pp_tps_mean'))} | "
                     f"{fmt(r.get('peer_pp_tps'))} | {fmt(r.get('pp_ratio'), '.2f')} | {fmt(r.get('tg_tps_mean'))} | "
                     f"{fmt(r.get('peer_tg_tps'))} | {fmt(r.get('tg_ratio'), '.2f')} | "
                     f"{fmt(r.get('decode_roofline_pct'), '.0f')} | {fmt(r.get('prefill_roofline_pct'), '.0f')} {r.get('prefill_roofline', '')} | "
                     f"{fmt(r.get('ttft_cold_pipeline_cache_ms'), '.0f')} / {fmt(r.get('ttft_warm_pipeline_cache_ms'), '.0f')} |")
    peers = {r.get("peer_build") for r in bench if r.get("peer_build")}
    if peers:
        lines.append(f"llama.cpp: {', '.join(sorted(peers))}, Vulkan backend, shaders built without cooperative matrix")
    t = s.get("tune")
    if t:
        lines.append("")
        lines.append(f"vkllm tune: {t['shapes']} shapes in {fmt(t.get('seconds'), '.1f')} s, {t['improved']} improved, "
                     f"{t['skipped']} skipped, {t.get('entries')} entries written (the benches read them)")
        for r in t["results"]:
            if r.get("improved"):
                lines.append(f"  {r.get('type')} m={r.get('m')} n={r.get('n')} k={r.get('k')} [{r.get('row')}]: "
                             f"{fmt(r.get('default_ms'), '.4f')} -> {fmt(r.get('best_ms'), '.4f')} ms ({r.get('config')})")
    sid = s.get("llama_sid")
    if sid:
        lines.append("")
        lines.append(f"llama.cpp at its best: {(sid['packages'] or '?').replace(chr(10), ', ')}, "
                     f"{sid['matrix_cores'] or 'matrix cores: not named in its log'}; both at the same prefill chunk")
        lines.append("| model | ubatch | vkllm pp t/s | llama.cpp pp -fa 0 | -fa 1 | pp ratio (best) | vkllm tg t/s | "
                     "llama.cpp tg -fa 0 | -fa 1 | tg ratio (best) |")
        lines.append("|---|---|---|---|---|---|---|---|---|---|")
        for r in sid["rows"]:
            lines.append(f"| {r.get('model', '?')} | {r.get('ubatch', '-')} | {fmt(r.get('pp_tps'))} | "
                         f"{fmt(r.get('peer_pp_fa0'))} | {fmt(r.get('peer_pp_fa1'))} | {fmt(r.get('pp_ratio'), '.2f')} | "
                         f"{fmt(r.get('tg_tps'))} | {fmt(r.get('peer_tg_fa0'))} | {fmt(r.get('peer_tg_fa1'))} | "
                         f"{fmt(r.get('tg_ratio'), '.2f')} |")
    c = s.get("constrained")
    if c:
        lines.append("")
        lines.append(f"constrained decode, {c['model']} (temperature 0.8, top-k 40): sampled "
                     f"{fmt(c.get('tg_sampled_tps_mean'))} t/s, with the JSON schema {fmt(c.get('tg_schema_tps_mean'))} t/s "
                     f"({fmt(c.get('tg_schema_tokens_mean'))} tokens per answer): ratio {fmt(c.get('tg_schema_ratio'), '.2f')}; "
                     f"choosing a token on the host {fmt(c.get('tg_sampled_sample_ms_per_token'), '.3f')} ms sampled, "
                     f"{fmt(c.get('tg_schema_sample_ms_per_token'), '.3f')} ms with the schema")
    sp = s.get("speculation")
    if sp:
        lines.append("")
        verify = ", ".join(f"k={v.get('drafts')} {fmt(v.get('vs_decode'), '.2f')}x" for v in sp.get("verify", []))
        lines.append(f"speculative decoding ({sp.get('mode')}, {sp.get('model')}): {fmt(sp.get('tg_tps_plain'))} t/s plain, "
                     f"{fmt(sp.get('tg_tps_speculative'))} t/s with drafts ({fmt(sp.get('speedup'), '.2f')}x), "
                     f"{sp.get('accepted')} of {sp.get('drafted')} drafts kept, {fmt(sp.get('tokens_per_step'), '.2f')} tokens "
                     f"per step, same text: {'yes' if sp.get('same_text') else 'NO'}; a step of 1 + k rows against one token "
                     f"({fmt(sp.get('decode_step_ms'), '.3f')} ms): {verify}")
    bl = s.get("blend")
    if bl:
        lines.append("")
        lines.append(f"CacheBlend ({bl.get('model')}, {bl.get('chunks')} documents of {bl.get('chunk_tokens')} tokens, "
                     f"{bl.get('prompt_tokens')}-token prompt): time to first token {fmt(bl.get('ttft_full_ms'))} ms full, "
                     f"{fmt(bl.get('ttft_blend_ms'))} ms blended ({fmt(bl.get('speedup'), '.2f')}x), "
                     f"{fmt(bl.get('recompute_ratio'), '.3f')} recomputed, top-1 agreement "
                     f"{fmt(bl.get('top1_agreement'), '.3f')}, KL {fmt(bl.get('kl_divergence'), '.5f')} "
                     f"(no recompute {fmt(bl.get('kl_divergence_no_recompute'), '.5f')})")
    vis = s.get("vision")
    if vis:
        vit = vis.get("vit") or {}
        lines.append("")
        lines.append(f"image encode, {vis.get('projector')} ViT {vit.get('dim')} x {vit.get('layers')} "
                     f"({vit.get('weight_type')}), {vis.get('width')} x {vis.get('height')} px, {vis.get('patches')} patches, "
                     f"{vis.get('image_tokens')} image tokens: {fmt(vis.get('encode_ms'))} ms median "
                     f"(min {fmt(vis.get('encode_ms_min'))}, first {fmt(vis.get('encode_warmup_ms'))}), "
                     f"{fmt(vis.get('vit_gflop_per_s'))} GFLOP/s")
    if ops:
        lines.append("")
        lines.append(f"bench-ops ({ops.get('failed', '?')} failed checks), probes {ops.get('probes')}")
        lines.append("| op | shape | type | status | best us | GB/s | % BW | GFLOP/s | % peak (f32 FMA or int8 dot) |")
        lines.append("|---|---|---|---|---|---|---|---|---|")
        for r in ops.get("results", []):
            lines.append(f"| {r.get('op')} | {r.get('shape')} | {r.get('type')} | {r.get('status')} | "
                         f"{fmt(r.get('best_us'))} | {fmt(r.get('gbs'))} | {fmt(r.get('bw_pct'), '.0f')} | "
                         f"{fmt(r.get('gflops'))} | {fmt(r.get('peak_pct'), '.0f')} |")
    if alt_caps:
        lines.append("")
        lines.append(f"the other linear path (matvec and matmul): --caps {alt_caps}")
        if alt_rows:
            lines.append(f"| model | pp t/s | pp t/s {alt_caps} | tg t/s | tg t/s {alt_caps} |")
            lines.append("|---|---|---|---|---|")
        for r in alt_rows:
            lines.append(f"| {r['model']} | {fmt(r['pp_tps'])} | {fmt(r['alt_pp_tps'])} | {fmt(r['tg_tps'])} | "
                         f"{fmt(r['alt_tg_tps'])} |")
        if ops_alt:
            lines.append(f"| op | shape | type ({alt_caps}) | status | best us | GB/s | % BW | GFLOP/s |")
            lines.append("|---|---|---|---|---|---|---|---|")
            for r in ops_alt.get("results", []):
                lines.append(f"| {r.get('op')} | {r.get('shape')} | {r.get('type')} | {r.get('status')} | "
                             f"{fmt(r.get('best_us'))} | {fmt(r.get('gbs'))} | {fmt(r.get('bw_pct'), '.0f')} | "
                             f"{fmt(r.get('gflops'))} |")
    with open(os.path.join(out, "summary.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
