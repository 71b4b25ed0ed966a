#!/usr/bin/env python3
"""Writes tests/data/tokenizer/corpus.jsonl: the strings whose token ids must match Hugging Face `tokenizers`.

Covers multilingual text, emoji with ZWJ sequences, combining marks (NFC), contractions in any case, digit runs,
long runs of whitespace, source code, special-token text inside ordinary text, empty strings and whole documents.
"""
import json
import os
import random

CASES = [
    "",
    " ",
    "Hello world!",
    "Hello, world! How's it going? I'm fine, you're great, they've left, we'll see, he'd say.",
    "I'M SURE IT'S FINE. YOU'RE RIGHT. WE'LL SEE. THEY'VE GONE. SHE'D KNOW. He'S HeRe.",
    "don't won't can't shouldn't y'all ma'am o'clock rock'n'roll",
    "1 12 123 1234 12345 123456 1234567 3.14159 2,718,281 1e-9 0x7fffffff -42 +17",
    "Numbers: 00000000000000000000000000000000000001",
    "    four spaces before, tabs\t\t\there, and\n\n\n\nnewlines\r\n\r\nwindows",
    "trailing spaces        ",
    "        leading spaces",
    "\t\t\t\t\t\t\t\t",
    "\n",
    "\n\n\n\n\n\n\n\n\n\n\n\n",
    "a  b   c    d     e      f       g",
    "日本語のテキストです。東京は日本の首都です。",
    "中文文本测试：今天天气很好，我们去公园散步吧！",
    "한국어 텍스트입니다. 안녕하세요!",
    "Привет, мир! Как дела? Съешь же ещё этих мягких французских булок.",
    "مرحبا بالعالم! هذه جملة عربية للاختبار.",
    "שלום עולם! זה משפט בעברית.",
    "नमस्ते दुनिया! यह हिंदी में एक वाक्य है।",
    "สวัสดีชาวโลก นี่คือประโยคภาษาไทย",
    "Ελληνικά: Γειά σου Κόσμε",
    "Emoji: 😀😃😄 👍🏽 ❤️ 🇺🇸 🇯🇵",
    "ZWJ families: 👨‍👩‍👧‍👦 👩‍💻 🏳️‍🌈 🧑🏿‍🚀",
    "e\u0301 a\u0300 o\u0308 n\u0303 (decomposed) vs é à ö ñ (composed)",
    "A\u030a\u0327 Å\u0327 ḁ combining sequences",
    "Ｆｕｌｌｗｉｄｔｈ ｃｈａｒａｃｔｅｒｓ and ﬁ ligature",
    "def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n",
    "#include <stdio.h>\n\nint main(void) {\n\tprintf(\"%d\\n\", 42);\n\treturn 0;\n}\n",
    "const x = { a: [1, 2, 3], b: 'str', c: `tmpl ${y}` };  // comment\n/* block */",
    "SELECT id, name FROM users WHERE age >= 18 ORDER BY name DESC LIMIT 10;",
    "<html><body><p class=\"x\">Text &amp; more</p></body></html>",
    "https://example.com/path?query=1&other=two#frag user@example.org",
    "!!!??? ... --- *** ### $$$ %%% ^^^ &&& ((( ))) [[[ ]]] {{{ }}} ||| \\\\\\ /// ~~~ ```",
    "<|begin_of_text|>Hello<|end_of_text|>",
    "text before <|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|> text after",
    "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi<|im_end|>",
    "<think>\nreasoning here\n</think>\n\nanswer",
    "<|endoftext|>",
    "not special: <|unknown_token|> and < |im_start| >",
    "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>",
    "Mixed 日本 and English and русский and 123 and 😀 all together!",
    "a" * 300,
    "ab" * 200,
    " " * 100 + "x",
    "\u00a0non-breaking\u00a0spaces\u2003em\u2009thin",
    "zero\u200bwidth\u200cjoiners\u200d",
    "\ufeffbyte order mark",
    "Ünïcödé àccénts çà et là",
    "The quick brown fox jumps over the lazy dog. " * 5,
]


def document(seed, words=400):
    rng = random.Random(seed)
    vocab = ("the of and to in is was for on that with as by it at from his an were are which this be or has "
             "had not but first one their its new after who they have her she two been other when there all "
             "during into school time may years more most only over city some world would where later up such "
             "used many can state about national out known university united then made").split()
    out = []
    for i in range(words):
        w = rng.choice(vocab)
        if i % 17 == 0:
            w = w.capitalize()
        out.append(w)
        if i % 23 == 22:
            out.append(".\n\n" if rng.random() < 0.3 else ".")
        elif i % 7 == 6:
            out.append(",")
    return " ".join(out)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    path = os.path.join(here, "..", "..", "tests", "data", "tokenizer", "corpus.jsonl")
    with open(path, "w", encoding="utf-8") as f:
        for s in CASES + [document(1), document(2, 800)]:
            f.write(json.dumps(s, ensure_ascii=False) + "\n")
    print(f"wrote {len(CASES) + 2} strings to {os.path.normpath(path)}")


if __name__ == "__main__":
    main()
