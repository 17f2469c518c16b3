import type { IDataObject, IExecuteFunctions, IHttpRequestOptions, IWebhookFunctions } from 'n8n-workflow';
import { sleep } from 'n8n-workflow';

export const CREDENTIAL = 'safesendApi';

/** One answer of the service, or none (`status` 0) when the request did not get one. */
export interface Answer {
	status: number;
	body: IDataObject;
	retryAfterS: number | null;
	failure: string;
}

type Caller = IExecuteFunctions | IWebhookFunctions;

function parseBody(raw: unknown): IDataObject {
	if (raw !== null && typeof raw === 'object' && !Buffer.isBuffer(raw)) return raw as IDataObject;
	const text = Buffer.isBuffer(raw) ? raw.toString('utf8') : String(raw ?? '');
	try {
		const parsed: unknown = JSON.parse(text);
		return parsed !== null && typeof parsed === 'object' ? (parsed as IDataObject) : {};
	} catch {
		return { raw_answer: text.slice(0, 200) };
	}
}

function retryAfter(headers: unknown): number | null {
	const value = (headers as Record<string, unknown> | undefined)?.['retry-after'];
	const seconds = Number(value);
	return Number.isFinite(seconds) && seconds >= 0 ? seconds : null;
}

/** One request, authenticated by the credential (Bearer key or HMAC signature over the exact bytes). */
export async function call(
	ctx: Caller,
	baseUrl: string,
	method: 'GET' | 'POST',
	pathAndQuery: string,
	body: string | undefined,
	timeoutS: number,
): Promise<Answer> {
	const options: IHttpRequestOptions = {
		method,
		url: `${baseUrl.replace(/\/+$/, '')}${pathAndQuery}`,
		headers: { Accept: 'application/json', ...(body === undefined ? {} : { 'Content-Type': 'application/json' }) },
		body,
		json: false,
		encoding: 'text',
		returnFullResponse: true,
		ignoreHttpStatusErrors: true,
		timeout: Math.max(1, Math.round(timeoutS * 1000)),
	};
	try {
		const response = (await ctx.helpers.httpRequestWithAuthentication.call(ctx, CREDENTIAL, options)) as {
			statusCode: number;
			headers: unknown;
			body: unknown;
		};
		return {
			status: response.statusCode,
			body: parseBody(response.body),
			retryAfterS: retryAfter(response.headers),
			failure: `HTTP ${response.statusCode}`,
		};
	} catch (error) {
		// No answer: refused, reset, timed out. Never the credential: the message is the client's own.
		const code = (error as { code?: unknown; cause?: { code?: unknown } }).cause?.code ?? (error as { code?: unknown }).code;
		return { status: 0, body: {}, retryAfterS: null, failure: typeof code === 'string' ? code : 'no answer' };
	}
}

/** Answers that say nothing reached safesend or it could not take the request now: 408, and 429, which
 * Cloud Run answers when every instance is busy (max instances; functions serve one request at a time). */
export function isTransient(status: number): boolean {
	return status === 0 || status >= 500 || status === 408 || status === 429;
}

/** Send the same bytes until an answer that is not transient, or until `retryForS` has passed; any other
 * 4xx is final (retrying cannot fix it), network errors, 5xx, 408 and 429 are retried after Retry-After
 * (1-30 s, else 2 s). */
export async function callWithRetries(
	ctx: Caller,
	baseUrl: string,
	method: 'GET' | 'POST',
	pathAndQuery: string,
	body: string | undefined,
	retryForS: number,
	timeoutS: number,
): Promise<{ answer: Answer; tries: number }> {
	const deadline = Date.now() + retryForS * 1000;
	const maxTries = 1 + Math.ceil(retryForS); // at least 1 s between tries: bounded in count too
	let answer: Answer = { status: 0, body: {}, retryAfterS: null, failure: 'not tried' };
	let tries = 0;
	while (tries < maxTries) {
		const left = (deadline - Date.now()) / 1000;
		answer = await call(ctx, baseUrl, method, pathAndQuery, body, tries === 0 ? timeoutS : Math.min(timeoutS, Math.max(left, 1)));
		tries += 1;
		if (!isTransient(answer.status)) break;
		const pause = Math.min(Math.max(answer.retryAfterS ?? 2, 1), 30);
		if (Date.now() + pause * 1000 > deadline) break;
		await sleep(pause * 1000);
	}
	return { answer, tries };
}

export function query(fields: Record<string, string>): string {
	return Object.entries(fields)
		.map(([k, v]) => `${encodeURIComponent(k)}=${encodeURIComponent(v)}`)
		.join('&');
}
