// Parses an AsyncAPI document with the AsyncAPI parser (its schema and its
// Spectral rules) and exits 1 on any diagnostic of severity "error" (0) or
// when no document came out; every diagnostic is printed.
// Usage: node validate.mjs docs/asyncapi.yaml
import { readFile } from 'node:fs/promises';
import { Parser } from '@asyncapi/parser';

const SEVERITY = ['error', 'warning', 'information', 'hint'];
const path = process.argv[2];
if (!path) {
  console.error('usage: node validate.mjs FILE');
  process.exit(2);
}
const { document, diagnostics } = await new Parser().parse(await readFile(path, 'utf8'), { source: path });
for (const d of diagnostics) {
  const where = d.path && d.path.length ? d.path.join('.') : '(document)';
  console.log(`${SEVERITY[d.severity] ?? d.severity} ${d.code} at ${where}: ${d.message}`);
}
const errors = diagnostics.filter((d) => d.severity === 0).length;
const others = diagnostics.length - errors;
if (!document || errors) {
  console.log(`INVALID: ${errors} error(s), ${others} other diagnostic(s)`);
  process.exit(1);
}
console.log(`valid AsyncAPI ${document.version()}: ${document.channels().length} channels, ` +
  `${document.operations().length} operations, ${document.messages().length} messages; ` +
  `${others} diagnostic(s) below error`);
