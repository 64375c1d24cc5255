// Builds ndjson-replay.wasm: puts every `data/*.ndjson` file in front of `src/replay.js`
// as `DATASETS`, with the WASI file helper of the JavaScript template
// (`host/templates/js/files.js`) between them (componentize-js takes one source file),
// assembles its world (`wit/connector.wit`, `files.wit` and the WASI WIT), then runs
// componentize-js.
//
//   node build.mjs <out.wasm>      (npm ci first: it pins componentize-js)
import { readFileSync, readdirSync, writeFileSync, mkdirSync, copyFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const out = resolve(process.argv[2] ?? join(here, 'ndjson-replay.wasm'));
const datasets = {};
for (const name of readdirSync(join(here, 'data')).filter((n) => n.endsWith('.ndjson')).sort()) {
  datasets[name] = readFileSync(join(here, 'data', name), 'utf8').split('\n').filter((line) => line.trim() !== '');
}
mkdirSync(dirname(out), { recursive: true });

// The world: Sluice's 0.1.0 world, this plugin's additions, and the WASI packages they use.
const wit = join(dirname(out), 'ndjson-replay-wit');
const templateWit = join(here, '../../host/templates/js/wit');
mkdirSync(join(wit, 'deps'), { recursive: true });
copyFileSync(join(here, '../../wit/connector.wit'), join(wit, 'connector.wit'));
copyFileSync(join(here, 'files.wit'), join(wit, 'files.wit'));
for (const name of readdirSync(join(templateWit, 'deps'))) {
  copyFileSync(join(templateWit, 'deps', name), join(wit, 'deps', name));
}

// One module: the helper's functions become the bundle's own (not exports of the component).
const helper = readFileSync(join(here, '../../host/templates/js/files.js'), 'utf8').replace(/^export /gm, '');
const replay = readFileSync(join(here, 'src/replay.js'), 'utf8').replace(/^import .* from '\.\/files\.js';\n/m, '');
const bundle = join(dirname(out), 'ndjson-replay.bundle.js');
writeFileSync(bundle, `const DATASETS = ${JSON.stringify(datasets)};\n${helper}\n${replay}`);
execFileSync(
  join(here, 'node_modules/.bin/componentize-js'),
  ['--wit', wit, '--world-name', 'source-connector-with-files', '--disable', 'http', 'fetch-event', '-o', out, bundle],
  { stdio: 'inherit' },
);
