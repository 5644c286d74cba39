// Runs an ONNX model with ONNX Runtime's CPU library (the npm package onnxruntime-node; NODE_PATH names the
// node_modules folder that holds it), as the tests' and benchmarks' peer.
//
//   node ort_run.js MODEL INPUT.bin DIMS DTYPE OUT_PREFIX [THREADS [REPEAT]]
//
// INPUT.bin: the input "images" as raw little-endian f32 (DTYPE f32) or f16 bits (DTYPE f16) of shape DIMS (1,3,640,640).
// Writes OUT_PREFIX.bin (output0's raw data) and OUT_PREFIX.json ({"dims", "type"}); prints one JSON line: the
// session's creation time and, with REPEAT > 0, the median, p90 and min of REPEAT timed runs after one warm-up
// (milliseconds), and ONNX Runtime's version. With ORT_PROFILE=PREFIX in the environment, ONNX Runtime's profiler is on
// (enableProfiling) and writes its trace of the timed runs (chrome-trace JSON: each node's kernel time) to
// PREFIX_<date>.json; the line then names it ("profile"). bench/model/ort_profile.py sums it per op kind.
'use strict';
const fs = require('fs');
const ort = require('onnxruntime-node');

async function main() {
  const [model, inputPath, dimsText, dtype, outPrefix, threadsText, repeatText] = process.argv.slice(2);
  if (!outPrefix || !['f32', 'f16'].includes(dtype)) {
    console.error('usage: node ort_run.js MODEL INPUT.bin DIMS f32|f16 OUT_PREFIX [THREADS [REPEAT]]');
    process.exit(2);
  }
  const dims = dimsText.split(',').map(Number);
  const bytes = fs.readFileSync(inputPath);
  const buffer = bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength);
  const data = dtype === 'f32' ? new Float32Array(buffer) : new Uint16Array(buffer);
  const threads = Number(threadsText || 2);
  const t0 = process.hrtime.bigint();
  const session = await ort.InferenceSession.create(model, {
    executionProviders: ['cpu'],
    intraOpNumThreads: threads,
    interOpNumThreads: 1,
    graphOptimizationLevel: 'all',
    ...(process.env.ORT_PROFILE ? {enableProfiling: true, profileFilePrefix: process.env.ORT_PROFILE} : {}),
  });
  const createMs = Number(process.hrtime.bigint() - t0) / 1e6;
  const feeds = {images: new ort.Tensor(dtype === 'f32' ? 'float32' : 'float16', data, dims)};
  let out = (await session.run(feeds)).output0;
  const repeat = Number(repeatText || 0);
  const times = [];
  for (let i = 0; i < repeat; ++i) {
    const t = process.hrtime.bigint();
    out = (await session.run(feeds)).output0;
    times.push(Number(process.hrtime.bigint() - t) / 1e6);
  }
  times.sort((a, b) => a - b);
  const profile = process.env.ORT_PROFILE ? session.endProfiling() : undefined;
  const raw = out.data;
  fs.writeFileSync(outPrefix + '.bin', Buffer.from(raw.buffer, raw.byteOffset, raw.byteLength));
  fs.writeFileSync(outPrefix + '.json', JSON.stringify({dims: out.dims, type: out.type}));
  const at = (q) => (times.length ? times[Math.min(times.length - 1, Math.floor(q * times.length))] : null);
  console.log(JSON.stringify({create_ms: createMs, median_ms: at(0.5), p90_ms: at(0.9), min_ms: at(0), runs: times.length,
                              threads, ...(profile ? {profile} : {}), version: require('onnxruntime-node/package.json').version}));
}

main().catch((e) => {
  console.error(String(e && e.message ? e.message : e));
  process.exit(1);
});
