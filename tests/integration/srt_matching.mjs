// srt's own host matching and domain-entry validation, for tests/integration/test_srt_matching.py.
//
// Reads one JSON object on stdin and writes one JSON object on stdout, in one
// process, so tens of thousands of cases cost one Node.js start:
//   {"srt": DIR,                      the installed @anthropic-ai/sandbox-runtime
//    "entries": [entry, ...],          -> "valid": [[allowedDomains ok, deniedDomains ok], ...]
//    "hosts": [host, ...],             -> "hosts": [canonical host, or null when srt denies it as malformed]
//    "matches": [[entry, host, port]]} -> "matches": [bool, ...]
// plus "lower": the code points above U+007F whose toLowerCase holds an ASCII
// character, with that lower case.
//
// Validity is srt's zod schema itself (NetworkConfigSchema); a host is what
// filterNetworkRequest (sandbox-manager.js) matches: isValidHost, then
// canonicalizeHost or the host as sent; a match is matchesDomainPatternWithPort.
import { readFileSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
import { join } from 'node:path';

const input = JSON.parse(readFileSync(0, 'utf8'));
const dist = join(input.srt, 'dist', 'sandbox');
const load = name => import(pathToFileURL(join(dist, name)).href);
const { matchesDomainPatternWithPort } = await load('domain-pattern.js');
const { canonicalizeHost, isValidHost } = await load('parent-proxy.js');
const { NetworkConfigSchema } = await load('sandbox-config.js');

const allowedEntry = NetworkConfigSchema.shape.allowedDomains.element;
const deniedEntry = NetworkConfigSchema.shape.deniedDomains.element;

function requestHost(host) {
  if (!isValidHost(host)) return null;
  return canonicalizeHost(host) ?? host;
}

const lower = [];
for (let c = 0x80; c < 0x110000; c++) {
  if (c >= 0xd800 && c <= 0xdfff) continue;
  const l = String.fromCodePoint(c).toLowerCase();
  if (/[\x00-\x7f]/.test(l)) lower.push([c, l]);
}

const out = {
  version: JSON.parse(readFileSync(join(input.srt, 'package.json'), 'utf8')).version,
  valid: (input.entries ?? []).map(e => [allowedEntry.safeParse(e).success, deniedEntry.safeParse(e).success]),
  hosts: (input.hosts ?? []).map(requestHost),
  matches: (input.matches ?? []).map(([entry, host, port]) => {
    const h = requestHost(host);
    return h !== null && matchesDomainPatternWithPort(h, port, entry);
  }),
  lower,
};
process.stdout.write(JSON.stringify(out));
