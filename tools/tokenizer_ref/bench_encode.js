#!/usr/bin/env node
// Times Hugging Face `tokenizers` (native Node binding) encoding one file: load time, then the best of 5 encodes.
//   NODE_PATH=/tmp/tokref/node_modules node bench_encode.js TOKENIZER_JSON INPUT
const fs = require("fs");
const { Tokenizer } = require("@anush008/tokenizers");

async function main() {
  const [file, input] = process.argv.slice(2);
  const text = fs.readFileSync(input, "utf8");
  let t0 = process.hrtime.bigint();
  const tok = Tokenizer.fromFile(file);
  const loadMs = Number(process.hrtime.bigint() - t0) / 1e6;
  let best = Infinity, ids = 0;
  for (let i = 0; i < 5; ++i) {
    t0 = process.hrtime.bigint();
    const enc = await tok.encode(text, null, { addSpecialTokens: false });
    const ms = Number(process.hrtime.bigint() - t0) / 1e6;
    ids = enc.getIds().length;
    best = Math.min(best, ms);
  }
  console.log(JSON.stringify({ impl: "tokenizers", load_ms: loadMs, encode_ms: best, ids,
                               mb_per_s: text.length / 1e6 / (best / 1e3) }));
}
main();
