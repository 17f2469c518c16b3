import type {
	IDataObject,
	IHookFunctions,
	INodeType,
	INodeTypeDescription,
	IWebhookFunctions,
	IWebhookResponseData,
} from 'n8n-workflow';
import { NodeConnectionTypes } from 'n8n-workflow';
import { verifySignature } from '../Safesend/signature';

const OUTCOMES = ['sent', 'failed', 'cancelled'];

export class SafesendTrigger implements INodeType {
	description: INodeTypeDescription = {
		displayName: 'Safesend Trigger',
		name: 'safesendTrigger',
		icon: { light: 'file:safesend.svg', dark: 'file:safesend.dark.svg' },
		group: ['trigger'],
		version: 1,
		subtitle: '={{$parameter["events"].join(", ")}}',
		description: 'Starts the workflow on safesend\'s signed callbacks: review items and job outcomes',
		defaults: { name: 'Safesend Trigger' },
		inputs: [],
		outputs: [NodeConnectionTypes.Main],
		credentials: [{ name: 'safesendApi', required: true }],
		webhooks: [
			{
				name: 'default',
				httpMethod: 'POST',
				responseMode: 'onReceived',
				path: 'safesend',
			},
		],
		properties: [
			{
				displayName:
					'Give this trigger\'s production URL as the Callback URL of Send Email (or of your own requests); safesend must allow its host (SAFESEND_CALLBACK_ALLOWED_HOSTS)',
				name: 'notice',
				type: 'notice',
				default: '',
			},
			{
				displayName: 'Events',
				name: 'events',
				type: 'multiOptions',
				options: [
					{ name: 'Needs Review', value: 'review', description: 'A job waits for a person' },
					{ name: 'Outcome', value: 'outcome', description: 'A job settled: sent, failed or cancelled' },
					{ name: 'In Progress', value: 'in_progress', description: 'Any other state a notice reports' },
				],
				default: ['review', 'outcome'],
			},
		],
	};

	// Nothing to register on the service: the URL travels with each request as callback_url.
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

	async webhook(this: IWebhookFunctions): Promise<IWebhookResponseData> {
		const credentials = await this.getCredentials('safesendApi');
		const request = this.getRequestObject();
		const response = this.getResponseObject();
		const raw = (request as unknown as { rawBody?: Buffer }).rawBody;
		const signature = String(this.getHeaderData()['x-safesend-signature'] ?? '');
		if (!raw || !verifySignature(signature, String(credentials.callbackSecret ?? ''), raw, Date.now())) {
			response.status(401).json({ error: 'unauthenticated', message: 'callback signature does not verify' });
			return { noWebhookResponse: true };
		}
		const notice = this.getBodyData() as IDataObject;
		const state = String(notice.state ?? '');
		const event = state === 'review' ? 'review' : OUTCOMES.includes(state) ? 'outcome' : 'in_progress';
		const wanted = this.getNodeParameter('events', []) as string[];
		if (!wanted.includes(event)) {
			response.status(200).json({ ok: true, ignored: event });
			return { noWebhookResponse: true };
		}
		return { workflowData: [this.helpers.returnJsonArray([{ ...notice, event }])] };
	}
}
