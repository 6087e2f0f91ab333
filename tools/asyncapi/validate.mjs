// Parses AsyncAPI documents with the AsyncAPI parser (its JSON Schema of the
// spec and of the bindings, and its Spectral rules); prints every
// diagnostic, then one verdict line per file, and exits 1 when any file has
// a diagnostic of severity "error" (0) or did not parse.
// Usage: node validate.mjs FILE...
import { readFile } from 'node:fs/promises';
import { Parser } from '@asyncapi/parser';

const SEVERITY = ['error', 'warning', 'information', 'hint'];
const files = process.argv.slice(2);
if (!files.length) {
  console.error('usage: node validate.mjs FILE...');
  process.exit(2);
}
const parser = new Parser();
let failed = false;
for (const path of files) {
  const { document, diagnostics } = await parser.parse(await readFile(path, 'utf8'), { source: path });
  for (const d of diagnostics) {
    const where = d.path && d.path.length ? d.path.join('.') : '(document)';
    console.log(`${path}: ${SEVERITY[d.severity] ?? d.severity} ${d.code} at ${where}: ${d.message}`);
  }
  const errors = diagnostics.filter((d) => d.severity === 0).length;
  const others = diagnostics.length - errors;
  if (!document || errors) {
    failed = true;
    console.log(`${path}: INVALID: ${errors} error(s), ${others} other diagnostic(s)`);
  } else {
    console.log(`${path}: valid AsyncAPI ${document.version()}: ${document.channels().length} channels, ` +
      `${document.operations().length} operations, ${document.messages().length} messages; ` +
      `${others} diagnostic(s) below error`);
  }
}
process.exit(failed ? 1 : 0);
