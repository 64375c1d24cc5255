// Reading the files a connector is granted (`sandbox.fs.read` in its config), through
// WASI's filesystem: the sandbox has no `node:fs`. Each granted directory is a WASI
// "preopen" whose name is the directory's path as the config wrote it.

import { getDirectories } from 'wasi:filesystem/preopens@0.2.12';

const CHUNK = 64n * 1024n;

// The granted directory that holds `path`, and the path inside it.
function grantFor(path) {
  const grants = getDirectories();
  for (const [descriptor, dir] of grants) {
    const root = dir.endsWith('/') ? dir : `${dir}/`;
    if (path.startsWith(root)) return { descriptor, inside: path.slice(root.length).replace(/\/+$/, '') };
  }
  const granted = grants.map(([, dir]) => dir).join(', ') || 'none';
  throw new Error(
    `cannot read ${path}: it is outside every directory granted to this connector; ` +
      `add its directory to sandbox.fs.read (granted: ${granted})`,
  );
}

// A WASI error code ('no-entry', 'access', ...) from whatever the binding threw.
const codeOf = (error) => error?.payload ?? error?.message ?? String(error);

// The whole file at `path` (an absolute path inside a granted directory) as bytes.
export function readFile(path) {
  const { descriptor, inside } = grantFor(path);
  let file;
  try {
    file = descriptor.openAt({ symlinkFollow: true }, inside, {}, { read: true });
  } catch (error) {
    throw new Error(`cannot read ${path}: ${codeOf(error)}`);
  }
  const chunks = [];
  let offset = 0n;
  for (;;) {
    const [bytes, ended] = file.read(CHUNK, offset);
    chunks.push(bytes);
    offset += BigInt(bytes.length);
    if (ended || bytes.length === 0) break;
  }
  const whole = new Uint8Array(Number(offset));
  let at = 0;
  for (const chunk of chunks) {
    whole.set(chunk, at);
    at += chunk.length;
  }
  return whole;
}

// The whole file at `path` as UTF-8 text.
export const readTextFile = (path) => new TextDecoder().decode(readFile(path));

// The names of the regular files in the directory at `path` (a granted directory, or one
// inside it), sorted.
export function listDirectory(path) {
  const root = path.endsWith('/') ? path : `${path}/`;
  const { descriptor, inside } = grantFor(root);
  let dir = descriptor;
  try {
    if (inside !== '') dir = descriptor.openAt({ symlinkFollow: true }, inside, { directory: true }, { read: true });
  } catch (error) {
    throw new Error(`cannot list ${path}: ${codeOf(error)}`);
  }
  const names = [];
  const entries = dir.readDirectory();
  for (let entry = entries.readDirectoryEntry(); entry !== undefined; entry = entries.readDirectoryEntry()) {
    if (entry.type === 'regular-file') names.push(entry.name);
  }
  return names.sort();
}
