import type {
	IDataObject,
	IExecuteFunctions,
	IHookFunctions,
	INodeExecutionData,
	INodeType,
	INodeTypeDescription,
	IWebhookFunctions,
	IWebhookResponseData,
} from 'n8n-workflow';
import { NodeConnectionTypes, NodeOperationError, sleep } from 'n8n-workflow';
import { properties } from './description';
import { gaveUpItem, isSettled, jobItem, OUTPUT_NAMES, OUTPUTS, type Outcome, rejectedItem } from './outcome';
import { call, callWithRetries, CREDENTIAL, isTransient, query } from './transport';
import { verifySignature } from './signature';

type Outputs = INodeExecutionData[][];

const POLL_INTERVAL_S = 1;

function emptyOutputs(): Outputs {
	return OUTPUTS.map(() => []);
}

function put(outputs: Outputs, json: IDataObject, item: number): void {
	const index = OUTPUTS.indexOf(json.outcome as Outcome);
	outputs[index < 0 ? 3 : index].push({ json, pairedItem: { item } });
}

/** The recipients as safesend takes them: a list (an expression may give one), or a comma-separated string. */
function recipients(value: unknown): string[] {
	if (Array.isArray(value)) return value.map((v) => String(v).trim()).filter((v) => v !== '');
	const text = String(value ?? '').trim();
	if (text.startsWith('[')) {
		try {
			const parsed: unknown = JSON.parse(text);
			if (Array.isArray(parsed)) return recipients(parsed);
		} catch {
			// not JSON: a plain list of addresses
		}
	}
	return (text.match(/("[^"]*"|[^,])+/g) ?? []).map((v) => v.trim()).filter((v) => v !== '');
}

interface Key {
	lookup: Record<string, string>; // the GET /status query that finds this job
	fields: IDataObject; // the key as sent
	dedupKey: string;
}

/** A key part: an expression that finds nothing must stop this item, never become the key "undefined". */
function keyPart(ctx: IExecuteFunctions, name: string, i: number): string {
	const value: unknown = ctx.getNodeParameter(name, i, '');
	const text = value === undefined || value === null ? '' : String(value).trim();
	if (text === '' || text === 'undefined' || text === 'null') {
		throw new NodeOperationError(ctx.getNode(), `${name} is empty for this item: nothing was sent`, {
			itemIndex: i,
			description: 'Every item needs its own dedup key (or customer, event and order): check the expression.',
		});
	}
	return text;
}

function keyOf(ctx: IExecuteFunctions, i: number): Key {
	if (ctx.getNodeParameter('keyMode', i) === 'dedupKey') {
		const dedupKey = keyPart(ctx, 'dedupKey', i);
		return { lookup: { dedup_key: dedupKey }, fields: { dedup_key: dedupKey }, dedupKey };
	}
	const parts = ['customerId', 'eventType', 'orderId'].map((name) => keyPart(ctx, name, i));
	const [customer_id, event_type, order_id] = parts;
	return {
		lookup: { customer_id, event_type, order_id },
		fields: { customer_id, event_type, order_id },
		dedupKey: parts.join(':'),
	};
}

function jobBody(ctx: IExecuteFunctions, i: number, key: Key): IDataObject {
	const body: IDataObject = {
		...key.fields,
		channel: String(ctx.getNodeParameter('channel', i)).trim(),
		to: recipients(ctx.getNodeParameter('to', i)),
		subject: String(ctx.getNodeParameter('subject', i)),
		text: String(ctx.getNodeParameter('text', i, '')),
	};
	const extra = ctx.getNodeParameter('additionalFields', i, {}) as IDataObject;
	for (const name of ['cc', 'bcc', 'reply_to'] as const) {
		const list = recipients(extra[name]);
		if (list.length) body[name] = list;
	}
	if (typeof extra.html === 'string' && extra.html !== '') body.html = extra.html;
	if (typeof extra.from === 'string' && extra.from.trim() !== '') body.from = extra.from.trim();
	if (typeof extra.callback_url === 'string' && extra.callback_url.trim() !== '') {
		body.callback_url = extra.callback_url.trim();
	}
	return body;
}

/** An answer of POST /send or GET /status as an output item. */
function answerItem(status: number, body: IDataObject, key: Key, failure: string, retryForS: number): IDataObject {
	if (status === 200 || status === 202 || (status === 422 && typeof body.job_id === 'string')) {
		return jobItem(body, status);
	}
	if (status >= 400 && status < 500 && !isTransient(status)) return rejectedItem(status, body, { dedup_key: key.dedupKey, ...key.fields });
	return gaveUpItem({ dedup_key: key.dedupKey, ...key.fields }, status || null, failure, retryForS);
}

/** A Decide that did not decide: an item error, whose context keeps what was asked and answered
 * (Continue On Fail puts that on Rejected). */
function decisionFailed(
	ctx: IExecuteFunctions,
	message: string,
	description: string,
	item: IDataObject,
	itemIndex: number,
): NodeOperationError {
	const error = new NodeOperationError(ctx.getNode(), message, { itemIndex, description });
	error.context.decision = item;
	return error;
}

const DECISION_REFUSED: Record<number, string> = {
	400: 'The decision request was refused (400)',
	403: 'Decisions by API are off for this credential (403)',
	409: 'The decision was not made (409)',
};

/** POST /decide for one item: the job view on a decision (made now, or replayed), else an item error. */
async function decide(ctx: IExecuteFunctions, baseUrl: string, i: number, timeoutS: number): Promise<IDataObject> {
	const reviewId = String(ctx.getNodeParameter('reviewId', i, '')).trim();
	const by = ctx.getNodeParameter('decideBy', i, 'jobId') as string;
	const body: IDataObject = { review_id: reviewId, decision: ctx.getNodeParameter('decision', i) as string };
	if (by !== 'reviewId') {
		const name = by === 'jobId' ? 'job_id' : 'dedup_key';
		body[name] = keyPart(ctx, by === 'jobId' ? 'jobId' : 'dedupKey', i);
	}
	for (const name of ['note', 'reviewer'] as const) {
		const value = String(ctx.getNodeParameter(name, i, '')).trim();
		if (value !== '') body[name] = value;
	}
	// The same decision again replays its first result: retrying after no answer or a 5xx is safe.
	const { answer } = await callWithRetries(ctx, baseUrl, 'POST', '/decide', JSON.stringify(body), 30, timeoutS);
	const reply = answer.body;
	if (answer.status === 200) {
		const result = String(reply.result);
		const note = `Decision ${String(body.decision)}: ${result}${reply.replayed === true ? ' (replayed: decided before)' : ''}.`;
		return jobItem(reply, 200, `${note} ${String(reply.message ?? '')}`.trim());
	}
	const said = typeof reply.message === 'string' ? reply.message : answer.failure;
	const item: IDataObject = { ...body, http_status: answer.status || null, error_code: reply.error ?? null };
	if (answer.status === 409 && reply.error === 'stale_review') {
		const current = typeof reply.current_review_id === 'string' ? reply.current_review_id : null;
		item.current_review_id = current;
		throw decisionFailed(
			ctx,
			`Review ID ${reviewId} is stale: nothing was decided`,
			current
				? `The job moved on since this review ID was read; its current review ID is ${current}. Look the job up ` +
						'(Get Status) and decide again on the current review if it still applies.'
				: 'The job no longer waits for a person (decided, or settled). Look it up with Get Status.',
			item,
			i,
		);
	}
	const headline = DECISION_REFUSED[answer.status];
	if (headline) throw decisionFailed(ctx, `${headline}: ${said}`, said, item, i);
	throw decisionFailed(
		ctx,
		`No decision answer from safesend (${answer.failure}): it may or may not be decided`,
		'Running the same decision again is safe: safesend replays a decision already made.',
		item,
		i,
	);
}

async function pollUntilSettled(
	ctx: IExecuteFunctions,
	baseUrl: string,
	first: IDataObject,
	key: Key,
	maxWaitS: number,
	timeoutS: number,
): Promise<IDataObject> {
	const deadline = Date.now() + maxWaitS * 1000;
	const jobId = String(first.job_id);
	let latest = first;
	for (let round = 0; round < Math.ceil(maxWaitS / POLL_INTERVAL_S) + 1 && Date.now() < deadline; round++) {
		await sleep(POLL_INTERVAL_S * 1000);
		const answer = await call(ctx, baseUrl, 'GET', `/status?${query({ job_id: jobId })}`, undefined, timeoutS);
		if (answer.status >= 400 && answer.status < 500 && !isTransient(answer.status)) {
			return rejectedItem(answer.status, answer.body, { dedup_key: key.dedupKey, job_id: jobId });
		}
		if (answer.status !== 200) continue; // no answer, 5xx, 408 or 429: poll again
		latest = jobItem(answer.body, 200);
		if (isSettled(answer.body.state)) return latest;
	}
	return {
		...latest,
		message:
			`Still ${String(latest.state)} after waiting ${maxWaitS} s. safesend keeps working on it and never sends ` +
			`twice: look job ${jobId} up later with Get Status, or wait longer (Max Wait).`,
	};
}

export class Safesend implements INodeType {
	description: INodeTypeDescription = {
		displayName: 'Safesend',
		name: 'safesend',
		icon: { light: 'file:safesend.svg', dark: 'file:safesend.dark.svg' },
		group: ['output'],
		version: 1,
		subtitle: '={{$parameter["operation"]}}',
		description: 'Send Gmail messages exactly once per dedup key, and learn the outcome',
		defaults: { name: 'Safesend' },
		usableAsTool: true,
		inputs: [NodeConnectionTypes.Main],
		outputs: [
			NodeConnectionTypes.Main,
			NodeConnectionTypes.Main,
			NodeConnectionTypes.Main,
			NodeConnectionTypes.Main,
		],
		outputNames: OUTPUT_NAMES,
		credentials: [{ name: CREDENTIAL, required: true }],
		webhooks: [
			{
				// "Wait for Outcome: Callback" resumes here ($execution.resumeUrl), as the Wait node does
				name: 'default',
				httpMethod: 'POST',
				responseMode: 'onReceived',
				path: '',
				restartWebhook: true,
			},
		],
		properties,
	};

	// Nothing to register for the resume webhook: n8n routes $execution.resumeUrl to webhook() below.
	webhookMethods = {
		default: {
			async checkExists(this: IHookFunctions): Promise<boolean> {
				return true;
			},
			async create(this: IHookFunctions): Promise<boolean> {
				return true;
			},
			async delete(this: IHookFunctions): Promise<boolean> {
				return true;
			},
		},
	};

	async execute(this: IExecuteFunctions): Promise<INodeExecutionData[][]> {
		const items = this.getInputData();
		const outputs = emptyOutputs();
		const credentials = await this.getCredentials(CREDENTIAL);
		const baseUrl = String(credentials.baseUrl ?? '');
		const operation = this.getNodeParameter('operation', 0) as string;
		let waiting = false;
		let maxWaitForCallbackS = 0;
		for (let i = 0; i < items.length; i++) {
			try {
				const timeoutS = this.getNodeParameter('requestTimeout', i, 60) as number;
				if (operation === 'decide') {
					put(outputs, await decide(this, baseUrl, i, timeoutS), i);
					continue;
				}
				if (operation === 'getStatus') {
					const by = this.getNodeParameter('lookupBy', i) as string;
					const value = String(this.getNodeParameter(by === 'jobId' ? 'jobId' : 'dedupKey', i)).trim();
					const fields: Record<string, string> = by === 'jobId' ? { job_id: value } : { dedup_key: value };
					const key: Key = { lookup: fields, fields, dedupKey: by === 'jobId' ? '' : value };
					const { answer } = await callWithRetries(this, baseUrl, 'GET', `/status?${query(fields)}`, undefined, 30, timeoutS);
					put(outputs, answerItem(answer.status, answer.body, key, answer.failure, 30), i);
					continue;
				}
				const key = keyOf(this, i);
				const body = jobBody(this, i, key);
				const waitFor = this.getNodeParameter('waitForOutcome', i) as string;
				const maxWaitS = this.getNodeParameter('maxWait', i, 300) as number;
				if (waitFor === 'callback') {
					if (!credentials.callbackSecret) {
						throw new NodeOperationError(
							this.getNode(),
							'Wait for Outcome "Callback" needs the Callback Signing Secret in the Safesend API credential',
							{ itemIndex: i },
						);
					}
					body.callback_url = this.evaluateExpression('{{ $execution.resumeUrl }}', i) as string;
				}
				const retryForS = this.getNodeParameter('retryFor', i, 120) as number;
				const { answer } = await callWithRetries(this, baseUrl, 'POST', '/send', JSON.stringify(body), retryForS, timeoutS);
				let json = answerItem(answer.status, answer.body, key, answer.failure, retryForS);
				if (json.outcome === 'in_progress' && typeof json.job_id === 'string') {
					if (waitFor === 'poll') json = await pollUntilSettled(this, baseUrl, json, key, maxWaitS, timeoutS);
					if (waitFor === 'callback') {
						waiting = true;
						maxWaitForCallbackS = Math.max(maxWaitForCallbackS, maxWaitS);
						json = {
							...json,
							message:
								`No callback within the Max Wait (${maxWaitS} s). safesend keeps working on it and never sends ` +
								`twice: look job ${String(json.job_id)} up later with Get Status.`,
						};
					}
				}
				put(outputs, json, i);
			} catch (error) {
				if (!this.continueOnFail()) {
					throw new NodeOperationError(this.getNode(), error as Error, { itemIndex: i });
				}
				const context = error instanceof NodeOperationError ? error.context.decision : undefined;
				const item = typeof context === 'object' && context !== null ? (context as IDataObject) : {};
				const { message, description } = error as { message: string; description?: unknown };
				const detail = typeof description === 'string' && description ? `${message}. ${description}` : message;
				put(outputs, { ...item, outcome: 'rejected', error: message, message: detail }, i);
			}
		}
		if (waiting) {
			// Resumed by the first signed callback (webhook() below) or, after the Max Wait, by n8n itself:
			// n8n then forwards these prepared outputs unchanged (the waiting node is run as disabled).
			const entry = this.getExecuteData();
			entry.data = { main: outputs };
			entry.metadata = { ...(entry.metadata ?? {}), forwardAllOutputs: true } as typeof entry.metadata;
			await this.putExecutionToWait(new Date(Date.now() + maxWaitForCallbackS * 1000));
		}
		return outputs;
	}

	/** A callback resumed the execution: check its signature, then bring every job still in flight up to date. */
	async webhook(this: IWebhookFunctions): Promise<IWebhookResponseData> {
		const credentials = await this.getCredentials(CREDENTIAL);
		const request = this.getRequestObject();
		const raw = (request as unknown as { rawBody?: Buffer }).rawBody ?? Buffer.from(JSON.stringify(request.body ?? {}));
		const signature = String(this.getHeaderData()['x-safesend-signature'] ?? '');
		if (!verifySignature(signature, String(credentials.callbackSecret ?? ''), raw, Date.now())) {
			const response = this.getResponseObject();
			response.status(401).json({ error: 'unauthenticated', message: 'callback signature does not verify' });
			return { noWebhookResponse: true };
		}
		const prepared = preparedOutputs(this);
		const outputs = emptyOutputs();
		const baseUrl = String(credentials.baseUrl ?? '');
		const timeoutS = this.getNodeParameter('requestTimeout', 60) as number;
		for (let index = 0; index < OUTPUTS.length; index++) {
			for (const item of prepared[index] ?? []) {
				const paired = item.pairedItem;
				const at = typeof paired === 'object' && paired !== null && !Array.isArray(paired) ? paired.item : 0;
				let json = item.json;
				if (OUTPUTS[index] === 'in_progress' && typeof json.job_id === 'string') {
					const answer = await call(this, baseUrl, 'GET', `/status?${query({ job_id: json.job_id })}`, undefined, timeoutS);
					json =
						answer.status === 200
							? jobItem(answer.body, 200, isSettled(answer.body.state) ? undefined : String(json.message))
							: json;
				}
				put(outputs, json, at);
			}
		}
		return { workflowData: outputs };
	}
}

/** The outputs execute() prepared before waiting: the input of this node's resumed run. */
function preparedOutputs(ctx: IWebhookFunctions): Outputs {
	const internals = ctx as unknown as {
		runExecutionData?: { executionData?: { nodeExecutionStack?: Array<{ data?: { main?: Outputs } }> } };
	};
	const main = internals.runExecutionData?.executionData?.nodeExecutionStack?.[0]?.data?.main;
	if (!Array.isArray(main)) {
		throw new NodeOperationError(ctx.getNode(), 'resumed without the data of the waiting send');
	}
	return main.map((list) => (Array.isArray(list) ? list : []));
}
