import { createHmac } from 'crypto';
import type {
	ICredentialDataDecryptedObject,
	ICredentialTestRequest,
	ICredentialType,
	IHttpRequestOptions,
	INodeProperties,
} from 'n8n-workflow';

/** safesend's signature header: `t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>." + signed bytes)>`. */
export const SIGNATURE_HEADER = 'X-Safesend-Signature';

export function signatureHeader(secret: string, signed: string, now: number): string {
	const t = Math.floor(now / 1000);
	const v1 = createHmac('sha256', secret).update(`${t}.`).update(signed, 'utf8').digest('hex');
	return `t=${t},v1=${v1}`;
}

/** What the service signs: the raw body of a POST, the raw query string of a GET. */
function signedBytes(options: IHttpRequestOptions): string {
	if ((options.method ?? 'GET') === 'GET') {
		const url = options.url ?? '';
		const at = url.indexOf('?');
		return at === -1 ? '' : url.slice(at + 1);
	}
	return typeof options.body === 'string' ? options.body : '';
}

export class SafesendApi implements ICredentialType {
	name = 'safesendApi';

	displayName = 'Safesend API';

	icon = { light: 'file:safesend.svg', dark: 'file:safesend.dark.svg' } as const;

	documentationUrl = 'https://github.com/safesend/safesend/tree/main/integrations/n8n#credential';

	properties: INodeProperties[] = [
		{
			displayName: 'Base URL',
			name: 'baseUrl',
			type: 'string',
			default: '',
			placeholder: 'https://safesend.example.com',
			description:
				'Where send and status are served (the local stack: http://127.0.0.1:8080), without a trailing slash',
			required: true,
		},
		{
			displayName: 'Authentication',
			name: 'authMode',
			type: 'options',
			options: [
				{ name: 'API Key', value: 'apiKey', description: 'Authorization: Bearer ssk_...' },
				{
					name: 'HMAC Signature',
					value: 'hmac',
					description: 'X-Safesend-Signature over each request (SAFESEND_AUTH_HMAC_SECRET)',
				},
			],
			default: 'apiKey',
		},
		{
			displayName: 'API Key',
			name: 'apiKey',
			type: 'string',
			typeOptions: { password: true },
			default: '',
			placeholder: 'ssk_<key_id>_<secret>',
			displayOptions: { show: { authMode: ['apiKey'] } },
		},
		{
			displayName: 'HMAC Secret',
			name: 'hmacSecret',
			type: 'string',
			typeOptions: { password: true },
			default: '',
			displayOptions: { show: { authMode: ['hmac'] } },
		},
		{
			displayName: 'Callback Signing Secret',
			name: 'callbackSecret',
			type: 'string',
			typeOptions: { password: true },
			default: '',
			description:
				'SAFESEND_CALLBACK_HMAC_SECRET: verifies the callbacks that resume a waiting Send Email and start the Safesend Trigger',
		},
	];

	async authenticate(
		credentials: ICredentialDataDecryptedObject,
		requestOptions: IHttpRequestOptions,
	): Promise<IHttpRequestOptions> {
		const headers = { ...(requestOptions.headers ?? {}) };
		if (credentials.authMode === 'hmac') {
			headers[SIGNATURE_HEADER] = signatureHeader(
				String(credentials.hmacSecret ?? ''),
				signedBytes(requestOptions),
				Date.now(),
			);
		} else {
			headers.Authorization = `Bearer ${String(credentials.apiKey ?? '')}`;
		}
		return { ...requestOptions, headers };
	}

	// Authentication runs before the lookup: a job id that cannot exist answers 404 to a good key,
	// 401 to a wrong one (403: a verified caller that may not call status).
	test: ICredentialTestRequest = {
		request: {
			baseURL: '={{$credentials.baseUrl.replace(/\\/+$/, "")}}',
			url: '/status?job_id=00000000000000000000000000000000',
			method: 'GET',
			ignoreHttpStatusErrors: true,
		},
		rules: [
			{
				type: 'responseSuccessBody',
				properties: {
					key: 'error',
					value: 'unauthenticated',
					message: 'safesend refused these credentials (401): check the API key or HMAC secret',
				},
			},
			{
				type: 'responseSuccessBody',
				properties: {
					key: 'error',
					value: 'forbidden',
					message: 'safesend knows this caller but it may not call send/status (403)',
				},
			},
		],
	};
}
