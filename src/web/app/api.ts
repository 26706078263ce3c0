// Calls to the orchestrator API, relative to the page so the dashboard works wherever it is served.

export class ApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

export async function api<T>(method: 'GET' | 'POST' | 'PATCH' | 'DELETE', path: string, body?: unknown): Promise<T> {
  let response: Response;
  try {
    response = await fetch(path, {
      method,
      headers: body === undefined ? {} : { 'content-type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  } catch (error) {
    throw new ApiError(0, `the orchestrator is not answering (${(error as Error).message})`);
  }
  const text = await response.text();
  let parsed: unknown;
  try {
    parsed = text ? JSON.parse(text) : undefined;
  } catch {
    parsed = text;
  }
  if (!response.ok) {
    const message = parsed && typeof parsed === 'object' && 'message' in parsed ? String(parsed.message) : `${response.status} ${response.statusText}`;
    throw new ApiError(response.status, message);
  }
  return parsed as T;
}

export const servicePath = (name: string, rest = ''): string => `services/${encodeURIComponent(name)}${rest}`;
