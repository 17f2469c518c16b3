import { createHmac, timingSafeEqual } from 'crypto';

/** How far a callback's timestamp may be from now, either way (the service's own window). */
export const WINDOW_S = 300;

/** True when `header` (`t=<unix s>,v1=<hex>`, v1 possibly repeated during a secret rotation) signs
 * `body` with `secret` within the window: what devstack/receiver.py and safesend's auth.py check. */
export function verifySignature(header: string, secret: string, body: Buffer, nowMs: number): boolean {
	if (!secret || !header) return false;
	const stamps: string[] = [];
	const candidates: string[] = [];
	for (const part of header.split(',')) {
		const at = part.indexOf('=');
		if (at < 0) return false;
		const name = part.slice(0, at).trim();
		const value = part.slice(at + 1).trim();
		if (name === 't') stamps.push(value);
		if (name === 'v1') candidates.push(value);
	}
	if (stamps.length !== 1 || !/^[0-9]{1,12}$/.test(stamps[0])) return false;
	const t = Number(stamps[0]);
	if (Math.abs(nowMs / 1000 - t) > WINDOW_S) return false;
	const expected = Buffer.from(
		createHmac('sha256', secret).update(`${t}.`).update(body).digest('hex'),
		'utf8',
	);
	let matched = false;
	for (const candidate of candidates) {
		const given = Buffer.from(candidate, 'utf8');
		matched = (given.length === expected.length && timingSafeEqual(given, expected)) || matched;
	}
	return matched;
}
