// Builds ndjson-replay.wasm: puts every `data/*.ndjson` file in front of `src/replay.js`
// as `DATASETS` (componentize-js takes one source file), then runs componentize-js.
//
//   node build.mjs <out.wasm>      (npm ci first: it pins componentize-js)
import { readFileSync, readdirSync, writeFileSync, mkdirSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const out = resolve(process.argv[2] ?? join(here, 'ndjson-replay.wasm'));
const datasets = {};
for (const name of readdirSync(join(here, 'data')).filter((n) => n.endsWith('.ndjson')).sort()) {
  datasets[name] = readFileSync(join(here, 'data', name), 'utf8').split('\n').filter((line) => line.trim() !== '');
}
const bundle = join(dirname(out), 'ndjson-replay.bundle.js');
mkdirSync(dirname(out), { recursive: true });
writeFileSync(bundle, `const DATASETS = ${JSON.stringify(datasets)};\n${readFileSync(join(here, 'src/replay.js'), 'utf8')}`);
execFileSync(
  join(here, 'node_modules/.bin/componentize-js'),
  ['--wit', join(here, '../../wit'), '--world-name', 'source-connector', '--disable', 'http', 'fetch-event', '-o', out, bundle],
  { stdio: 'inherit' },
);
