import type { IDataObject } from 'n8n-workflow';

/** The node's outputs, in order; every item also names its output in `outcome`. */
export const OUTPUTS = ['sent', 'in_progress', 'needs_review_or_failed', 'rejected'] as const;
export type Outcome = (typeof OUTPUTS)[number];
export const OUTPUT_NAMES = ['Sent', 'In Progress', 'Needs Review or Failed', 'Rejected'];

const SETTLED = new Set(['sent', 'failed', 'review', 'cancelled']);

export function isSettled(state: unknown): boolean {
	return typeof state === 'string' && SETTLED.has(state);
}

export function outcomeOfState(state: unknown): Outcome {
	if (state === 'sent') return 'sent';
	if (state === 'review' || state === 'failed' || state === 'cancelled') return 'needs_review_or_failed';
	return 'in_progress';
}

/** What a person or the next node should do, for the states whose service text assumes an HTTP caller. */
const NEXT_STEP: Record<Outcome, string> = {
	sent: 'Done: the email was accepted by Gmail (replayed: true means an earlier run sent it). Nothing to do.',
	in_progress:
		'Not settled yet: nothing more to do for the email itself (safesend keeps checking, and never sends twice). ' +
		'Look the job up later with the Get Status operation (job_id or dedup_key), or use Wait for Outcome.',
	needs_review_or_failed:
		'Not sent on its own: review means a person must decide in the safesend review console; failed and cancelled ' +
		'mean it will not be sent. Re-running with the same key sends nothing.',
	rejected:
		'Refused by safesend (4xx), never retried: fix what error_code and fields say (or the credential), then run again.',
};

/** A job view (the service's JobView or StatusView) as an output item: the view, plus routing. */
export function jobItem(view: IDataObject, httpStatus: number, note?: string): IDataObject {
	const outcome = outcomeOfState(view.state);
	const service = typeof view.message === 'string' ? view.message : '';
	return {
		...view,
		http_status: httpStatus,
		outcome,
		message: note ?? NEXT_STEP[outcome],
		service_message: service,
	};
}

/** A refusal (4xx): the service's error body with `error` renamed, so that n8n does not take the
 * item for a failed item (n8n reads a top-level `error` as one). */
export function rejectedItem(httpStatus: number, body: IDataObject, key: IDataObject): IDataObject {
	const { error, message, ...rest } = body;
	return {
		...key,
		...rest,
		http_status: httpStatus,
		outcome: 'rejected' as Outcome,
		error_code: typeof error === 'string' ? error : `http_${httpStatus}`,
		message: `${typeof message === 'string' ? message : 'refused'}. ${NEXT_STEP.rejected}`,
	};
}

/** No answer (network errors, 5xx) within the retry time: the job may or may not exist. */
export function gaveUpItem(key: IDataObject, lastStatus: number | null, lastError: string, seconds: number): IDataObject {
	return {
		...key,
		http_status: lastStatus,
		outcome: 'in_progress' as Outcome,
		state: null,
		last_error: lastError,
		message:
			`No answer from safesend within ${seconds} s (last: ${lastError}). The job may or may not exist: look it up ` +
			'with Get Status by this dedup_key before doing anything else. Running the workflow again is safe: the same ' +
			'dedup key never sends a second email.',
	};
}
