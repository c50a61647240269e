// What the benchmark clients share: command-line values, prompt text and /metrics readings.

// The value after --name on the command line, or def.
export const arg = (name, def) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? process.argv[i + 1] : def;
};

// Python source: n distinct functions of about 30 tokens each, different for every seed.
export function source(seed, n) {
  let s = `# module ${seed}\n`;
  for (let i = 0; i < n; i++)
    s += `def f_${seed}_${i}(x, y):\n    z = x * ${(i * 7 + seed) % 97} + y\n    return z - ${i}\n\n`;
  return s;
}

// A metric's value from the server at url (NaN when it does not report it).
export async function metric(url, name) {
  const text = await (await fetch(`${url}/metrics`)).text();
  const m = text.match(new RegExp(`^${name} (\\S+)$`, 'm'));
  return m ? Number(m[1]) : NaN;
}
