// What the page keeps in the browser: conversations in IndexedDB (one record per conversation,
// its messages inside, so that a reload or a second tab finds them), and the sampling settings
// and API key in localStorage. Nothing of it is sent anywhere but to this server's API.

const DB_NAME = 'vkllm-chat';
const STORE = 'conversations';

let dbPromise = null;

function openDb() {
  return new Promise((resolve, reject) => {
    const req = indexedDB.open(DB_NAME, 1);
    req.onupgradeneeded = () => req.result.createObjectStore(STORE, { keyPath: 'id' });
    req.onsuccess = () => resolve(req.result);
    req.onerror = () => reject(req.error);
  });
}

// The database, or null where the browser refuses it (storage disabled, some private windows):
// then conversations live in this tab only.
async function database() {
  try {
    return await (dbPromise ??= openDb());
  } catch {
    return null;
  }
}
const memory = new Map();

// Runs `fn` on the store in one transaction and resolves with its request's result once committed;
// `fallback()` instead where there is no database.
async function run(mode, fn, fallback) {
  const db = await database();
  if (!db) return fallback();
  return new Promise((resolve, reject) => {
    const tx = db.transaction(STORE, mode);
    const req = fn(tx.objectStore(STORE));
    tx.oncomplete = () => resolve(req.result);
    tx.onerror = () => reject(tx.error);
    tx.onabort = () => reject(tx.error);
  });
}

// A conversation: { id, title, created, updated, messages: [{ role, content, reasoning?, note? }] }.
export const conversations = {
  async list() {
    const all = await run('readonly', (s) => s.getAll(), () => [...memory.values()].map((c) => structuredClone(c)));
    return all.sort((a, b) => b.updated - a.updated);
  },
  get: (id) => run('readonly', (s) => s.get(id), () => structuredClone(memory.get(id))),
  put: (c) => run('readwrite', (s) => s.put(c), () => memory.set(c.id, structuredClone(c))),
  remove: (id) => run('readwrite', (s) => s.delete(id), () => memory.delete(id)),
  // False where conversations are not kept past this tab.
  kept: async () => (await database()) !== null,
};

export function newConversation() {
  const now = Date.now();
  // Not crypto.randomUUID(): a page reached over plain HTTP from another machine lacks it.
  const id = `${now.toString(36)}-${Math.random().toString(36).slice(2, 10)}`;
  return { id, title: 'New chat', created: now, updated: now, messages: [] };
}

// Sampling settings as the form holds them (strings; '' leaves the value to the server).
const SETTINGS_KEY = 'vkllm.settings';
const SETTINGS = ['system', 'temperature', 'top_p', 'max_tokens'];

export function loadSettings() {
  let saved = {};
  try {
    saved = JSON.parse(localStorage.getItem(SETTINGS_KEY) ?? '{}') ?? {};
  } catch {
    // A damaged entry is replaced by the next save.
  }
  return Object.fromEntries(SETTINGS.map((k) => [k, typeof saved[k] === 'string' ? saved[k] : '']));
}

export function saveSettings(settings) {
  localStorage.setItem(SETTINGS_KEY, JSON.stringify(Object.fromEntries(SETTINGS.map((k) => [k, settings[k] ?? '']))));
}

const KEY_KEY = 'vkllm.apiKey';
export const apiKey = {
  get: () => localStorage.getItem(KEY_KEY) ?? '',
  set: (key) => (key ? localStorage.setItem(KEY_KEY, key) : localStorage.removeItem(KEY_KEY)),
};
