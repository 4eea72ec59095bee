// The server's OpenAI API as the page uses it: the model list, and chat completions streamed as
// server-sent events. Paths are relative, so that the page works as well behind a proxy that
// serves it under a prefix. A 401 asks for the API key (askKey) and retries with it as a Bearer
// token; the key is remembered by the caller.

export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

// The message of an error response in OpenAI's shape, or the status line when it has none.
async function errorOf(res) {
  let message = `${res.status} ${res.statusText}`;
  try {
    const body = await res.json();
    if (body?.error?.message) message = body.error.message;
  } catch {
    // Not JSON: the status line it is.
  }
  return new ApiError(res.status, message);
}

export class Api {
  // getKey(): the stored key or ''; askKey(message): resolves with a new key, or '' when the
  // person declined (the request then fails with the server's 401).
  constructor({ getKey, askKey }) {
    this.getKey = getKey;
    this.askKey = askKey;
  }

  async request(path, init = {}) {
    for (;;) {
      const headers = { ...(init.headers ?? {}) };
      const key = this.getKey();
      if (key) headers.Authorization = `Bearer ${key}`;
      const res = await fetch(path, { ...init, headers });
      if (res.status !== 401) return res;
      const err = await errorOf(res);
      if (!(await this.askKey(err.message))) throw err;
    }
  }

  async models() {
    const res = await this.request('v1/models');
    if (!res.ok) throw await errorOf(res);
    return (await res.json()).data ?? [];
  }

  // Yields each chunk of a streamed chat completion. Aborting `signal` (the Stop button) ends the
  // fetch, and the server cancels the generation when the connection closes.
  async *chat(body, signal) {
    const res = await this.request('v1/chat/completions', {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ ...body, stream: true }),
      signal,
    });
    if (!res.ok) throw await errorOf(res);
    for await (const event of sseData(res.body)) {
      if (event === '[DONE]') return;
      const chunk = JSON.parse(event);
      // An error after the stream began comes as an event of its own, without an HTTP status.
      if (chunk.error) throw new ApiError(0, chunk.error.message ?? 'The stream failed.');
      yield chunk;
    }
  }
}

// The data of each server-sent event of a byte stream (comments and other fields skipped).
export async function* sseData(stream) {
  const reader = stream.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value;
    const events = buffer.split(/\r?\n\r?\n/);
    buffer = events.pop();
    for (const event of events) {
      const data = event.split(/\r?\n/).filter((l) => l.startsWith('data:')).map((l) => l.slice(5).replace(/^ /, ''));
      if (data.length) yield data.join('\n');
    }
  }
}
