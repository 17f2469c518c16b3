import type { IDataObject } from 'n8n-workflow';

/** How long a notice id is remembered. safesend re-sends a notice only within its callback horizon
 * (SAFESEND_CALLBACK_HORIZON_S, 1 h by default), mostly seconds after a crash between its POST and
 * its record; a day covers a raised horizon with margin. */
export const SEEN_FOR_MS = 24 * 60 * 60 * 1000;
/** At most this many ids (the newest) per trigger: the list is saved whole in the workflow's static
 * data (~60 KB at most), and 1,000 notices between a notice and its re-delivery is far beyond the
 * minutes that takes. */
export const SEEN_MAX = 1000;
/** safesend's ids are `<job id>:n<seq>`; a longer one is not deduped (it runs). */
export const NOTICE_ID_MAX = 200;

type Seen = [string, number];

/** Ids this n8n process has seen, per mode, workflow and trigger node. n8n 2.41 saves static data
 * set in webhook() when the call starts no execution, but not when it starts one and the workflow
 * already has static data (WorkflowRunner.establishContextForPersistence wraps the same object in a
 * new Workflow, which clears its "changed" mark before live-webhooks saves it): the process keeps
 * what it saw, and the next duplicate, which starts no run, saves the list. */
const seenHere = new Map<string, Seen[]>();

/** The id to dedupe `notice` on, or undefined (none, not a string, or too long): such a notice runs. */
export function noticeIdOf(notice: IDataObject): string | undefined {
	const id = notice.notice_id;
	return typeof id === 'string' && id.length > 0 && id.length <= NOTICE_ID_MAX ? id : undefined;
}

function valid(stored: unknown): Seen[] {
	if (!Array.isArray(stored)) return [];
	return stored
		.filter((e): e is Seen => Array.isArray(e) && typeof e[0] === 'string' && typeof e[1] === 'number')
		.map(([id, at]) => [id, at]);
}

/** The ids of `store` and of this process for `key`, unexpired, each once (its first sighting),
 * oldest first, at most SEEN_MAX. */
function merged(store: IDataObject, key: string, nowMs: number): Seen[] {
	const first = new Map<string, number>();
	for (const [id, at] of [...valid(store.noticeIds), ...(seenHere.get(key) ?? [])]) {
		const known = first.get(id);
		if (nowMs - at < SEEN_FOR_MS && (known === undefined || at < known)) first.set(id, at);
	}
	return [...first.entries()].sort((a, b) => a[1] - b[1]).slice(-SEEN_MAX);
}

/** Record `id` for trigger `key` (workflow id and node) in `store` (its static data) and in this
 * process; true when it was not seen before. The list is assigned whole, so n8n sees the change. */
export function firstSight(store: IDataObject, key: string, id: string, nowMs: number): boolean {
	const seen = merged(store, key, nowMs);
	const fresh = !seen.some(([known]) => known === id);
	const kept = fresh ? [...seen, [id, nowMs] as Seen].slice(-SEEN_MAX) : seen;
	seenHere.set(key, kept);
	store.noticeIds = kept.map(([known, at]) => [known, at]);
	return fresh;
}
