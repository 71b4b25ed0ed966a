#!/usr/bin/env node
// Writes the reference token ids of tests/data/tokenizer/corpus.jsonl with Hugging Face `tokenizers` itself (its
// native Node binding, npm package @anush008/tokenizers), for each tokenizer fetched by scripts/fetch-tokenizers.sh.
//   npm install --prefix /tmp/tokref @anush008/tokenizers@0.6.0
//   NODE_PATH=/tmp/tokref/node_modules node tools/tokenizer_ref/make_golden.js ~/.cache/photon/tokenizers
// Output per tokenizer: tests/data/tokenizer/NAME.golden.jsonl, one line per corpus string:
//   {"ids": [...without special tokens], "ids_special": [...with], "decoded": decode(ids_special, false)}
const fs = require("fs");
const path = require("path");
const { Tokenizer } = require("@anush008/tokenizers");

async function main() {
  const cache = process.argv[2];
  const dataDir = path.join(__dirname, "..", "..", "tests", "data", "tokenizer");
  const corpus = fs.readFileSync(path.join(dataDir, "corpus.jsonl"), "utf8").split("\n").filter((l) => l.length)
    .map((l) => JSON.parse(l));
  for (const name of ["llama3", "llama3_2", "qwen3"]) {
    const tok = Tokenizer.fromFile(path.join(cache, name, "tokenizer.json"));
    const lines = [];
    for (const text of corpus) {
      const plain = await tok.encode(text, null, { addSpecialTokens: false });
      const special = await tok.encode(text, null, { addSpecialTokens: true });
      const ids = Array.from(plain.getIds());
      const idsSpecial = Array.from(special.getIds());
      const decoded = await tok.decode(idsSpecial, false);
      lines.push(JSON.stringify({ ids, ids_special: idsSpecial, decoded }));
    }
    fs.writeFileSync(path.join(dataDir, `${name}.golden.jsonl`), lines.join("\n") + "\n");
    console.log(`${name}: ${lines.length} references`);
  }
}
main().catch((e) => { console.error(e); process.exit(1); });
