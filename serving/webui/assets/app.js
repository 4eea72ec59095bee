// The chat page: the conversation list, the messages of the open conversation, the composer with
// Send / Stop, Regenerate on the last answer, and the settings and API-key dialogs. State lives in
// store.js (the browser) and the server (api.js); this module keeps the page in step with both.

import { Api, ApiError } from './api.js';
import { renderMarkdown } from './markdown.js';
import { apiKey, conversations, loadSettings, newConversation, saveSettings } from './store.js';

const $ = (id) => document.getElementById(id);
const ui = {
  list: $('conversations'),
  messages: $('messages'),
  model: $('model-name'),
  prompt: $('prompt'),
  send: $('send'),
  stop: $('stop'),
  status: $('status'),
  settings: $('settings'),
  settingsForm: $('settings-form'),
  keyDialog: $('key-dialog'),
  keyForm: $('key-form'),
  keyInput: $('key-input'),
  keyError: $('key-error'),
  template: $('message-template'),
  attach: $('attach'),
  imageFile: $('image-file'),
  attachments: $('attachments'),
};

let current = null;  // the open conversation
let modelId = '';
let running = null;  // { controller } while an answer streams
let takesImages = false;  // the server's model has a vision encoder (`vkllm serve --mmproj`)
let pending = [];  // data URLs of the images attached to the message being written

// --- the API key dialog: resolves with the key typed, or '' when cancelled ------------------------
let keyAnswer = null;
function askKey(message) {
  ui.keyError.textContent = apiKey.get() ? message : '';
  ui.keyInput.value = '';
  if (!ui.keyDialog.open) ui.keyDialog.showModal();
  return new Promise((resolve) => { keyAnswer = resolve; });
}
function answerKey(key) {
  if (ui.keyDialog.open) ui.keyDialog.close();
  if (key) apiKey.set(key);
  keyAnswer?.(key);
  keyAnswer = null;
}
ui.keyForm.addEventListener('submit', (e) => {
  e.preventDefault();
  answerKey(ui.keyInput.value.trim());
});
$('key-cancel').addEventListener('click', () => answerKey(''));
ui.keyDialog.addEventListener('cancel', (e) => {
  e.preventDefault();
  answerKey('');
});

const api = new Api({ getKey: apiKey.get, askKey });

// --- status line --------------------------------------------------------------------------------
function showStatus(text) {
  ui.status.textContent = text;
  ui.status.hidden = !text;
}

// --- settings -------------------------------------------------------------------------------------
$('settings-button').addEventListener('click', () => {
  const s = loadSettings();
  for (const [k, v] of Object.entries(s)) ui.settingsForm.elements[k].value = v;
  ui.settings.showModal();
});
$('settings-cancel').addEventListener('click', () => ui.settings.close());
ui.settingsForm.addEventListener('submit', (e) => {
  e.preventDefault();
  const f = ui.settingsForm.elements;
  saveSettings({ system: f.system.value, temperature: f.temperature.value, top_p: f.top_p.value, max_tokens: f.max_tokens.value });
  ui.settings.close();
});
$('forget-key').addEventListener('click', () => apiKey.set(''));

// The request's sampling fields: those the person set, as numbers.
function sampling(s) {
  const out = {};
  for (const k of ['temperature', 'top_p']) if (s[k] !== '') out[k] = Number(s[k]);
  if (s.max_tokens !== '') out.max_tokens = Math.trunc(Number(s.max_tokens));
  return out;
}

// A stored message as the API takes it: a message with images is content parts, the images first
// (where a vision model's chat format usually has them) and then the text.
function apiMessage(m) {
  if (!m.images?.length) return { role: m.role, content: m.content };
  const parts = m.images.map((url) => ({ type: 'image_url', image_url: { url } }));
  if (m.content) parts.push({ type: 'text', text: m.content });
  return { role: m.role, content: parts };
}

// --- images attached to the next message (a file chooser, or pasted) ------------------------------
// The request body carries them base64-encoded (4/3 of their size) under the server's 8 MiB cap.
const MAX_IMAGE_BYTES = 5 << 20;
const IMAGE_TYPES = ['image/png', 'image/jpeg', 'image/gif', 'image/bmp', 'image/webp'];

function thumbnail(url) {
  const img = document.createElement('img');
  img.className = 'thumb';
  img.src = url;
  img.alt = 'Attached image';
  return img;
}

function renderAttachments() {
  ui.attachments.replaceChildren(...pending.map((url, i) => {
    const fig = document.createElement('figure');
    const remove = document.createElement('button');
    remove.type = 'button';
    remove.textContent = '×';
    remove.title = 'Remove this image';
    remove.addEventListener('click', () => {
      pending.splice(i, 1);
      renderAttachments();
    });
    fig.append(thumbnail(url), remove);
    return fig;
  }));
  ui.attachments.hidden = pending.length === 0;
}

function readDataUrl(file) {
  return new Promise((resolve, reject) => {
    const reader = new FileReader();
    reader.onload = () => resolve(reader.result);
    reader.onerror = () => reject(reader.error);
    reader.readAsDataURL(file);
  });
}

async function attachFiles(files) {
  for (const file of files) {
    if (!IMAGE_TYPES.includes(file.type)) {
      showStatus(`${file.name || 'That file'} is not a PNG, JPEG, GIF, BMP or WebP image.`);
      continue;
    }
    if (file.size > MAX_IMAGE_BYTES) {
      showStatus(`${file.name || 'That image'} is larger than ${MAX_IMAGE_BYTES >> 20} MiB.`);
      continue;
    }
    try {
      pending.push(await readDataUrl(file));
    } catch (e) {
      showStatus(`${file.name || 'The image'} could not be read: ${e.message}`);
    }
  }
  renderAttachments();
}

ui.attach.addEventListener('click', () => ui.imageFile.click());
ui.imageFile.addEventListener('change', async () => {
  await attachFiles([...ui.imageFile.files]);
  ui.imageFile.value = '';
});
ui.prompt.addEventListener('paste', (e) => {
  if (!takesImages) return;
  const files = [...(e.clipboardData?.files ?? [])].filter((f) => f.type.startsWith('image/'));
  if (!files.length) return;
  e.preventDefault();
  attachFiles(files);
});

// --- the conversation list ------------------------------------------------------------------------
async function refreshList() {
  const all = await conversations.list();
  ui.list.replaceChildren(...all.map((c) => {
    const li = document.createElement('li');
    li.dataset.id = c.id;
    li.classList.toggle('current', c.id === current?.id);
    const open = document.createElement('button');
    open.type = 'button';
    open.className = 'open';
    open.textContent = c.title;
    open.title = c.title;
    open.addEventListener('click', () => openConversation(c.id));
    const del = document.createElement('button');
    del.type = 'button';
    del.className = 'delete';
    del.textContent = '×';
    del.title = 'Delete this conversation';
    del.addEventListener('click', () => deleteConversation(c.id));
    li.append(open, del);
    return li;
  }));
}

async function openConversation(id) {
  if (running) return;
  current = (await conversations.get(id)) ?? newConversation();
  renderMessages();
  await refreshList();
}

async function deleteConversation(id) {
  if (running && id === current?.id) return;
  await conversations.remove(id);
  if (id === current?.id) {
    current = newConversation();
    renderMessages();
  }
  await refreshList();
}

$('new-chat').addEventListener('click', () => {
  if (running) return;
  current = newConversation();
  renderMessages();
  refreshList();
  ui.prompt.focus();
});

// --- messages -------------------------------------------------------------------------------------
function messageElement(m) {
  const el = ui.template.content.firstElementChild.cloneNode(true);
  el.classList.add(m.role);
  el.querySelector('.role').textContent = m.role === 'user' ? 'You' : 'Assistant';
  updateMessage(el, m);
  return el;
}

// Brings `el` up to date with `m`; while it streams (`live`), its reasoning is shown as it comes.
function updateMessage(el, m, live = false) {
  const images = el.querySelector('.images');
  images.hidden = !m.images?.length;
  if (m.images?.length && images.childElementCount !== m.images.length) images.replaceChildren(...m.images.map(thumbnail));
  const content = el.querySelector('.content');
  if (m.role === 'assistant') renderMarkdown(content, m.content);
  else content.textContent = m.content;
  const reasoning = el.querySelector('.reasoning');
  reasoning.hidden = !m.reasoning;
  if (m.reasoning) {
    reasoning.querySelector('.reasoning-text').textContent = m.reasoning;
    reasoning.querySelector('summary').textContent = live && !m.content ? 'Thinking…' : 'Reasoning';
  }
  const note = el.querySelector('.note');
  note.textContent = m.note ?? '';
  note.hidden = !m.note;
  note.classList.toggle('error', Boolean(m.error));
}

function renderMessages() {
  ui.messages.replaceChildren(...current.messages.map(messageElement));
  const last = ui.messages.lastElementChild;
  if (last?.classList.contains('assistant') && !running) {
    const regen = document.createElement('button');
    regen.type = 'button';
    regen.className = 'regenerate';
    regen.textContent = 'Regenerate';
    regen.addEventListener('click', regenerate);
    last.querySelector('.actions').append(regen);
  }
  ui.messages.scrollTop = ui.messages.scrollHeight;
}

function setRunning(r) {
  running = r;
  ui.send.hidden = Boolean(r);
  ui.stop.hidden = !r;
  document.body.classList.toggle('running', Boolean(r));
}

// Stores the open conversation (`snapshot`: a copy of it to store instead, mid-stream).
async function save(snapshot = current) {
  current.updated = snapshot.updated = Date.now();
  try {
    await conversations.put(snapshot);
  } catch (e) {
    showStatus(`The conversation could not be stored in this browser: ${e.message}`);
  }
  await refreshList();
}

// A copy of the conversation whose last answer says it was cut by the page going away: what a
// reload finds if it comes while the answer streams (the server cancels the request then).
function interrupted() {
  const copy = structuredClone(current);
  copy.messages.at(-1).note = 'Interrupted: the page was closed or reloaded while the answer streamed.';
  return copy;
}

// Streams the answer to the conversation so far into a new assistant message.
async function answer() {
  const settings = loadSettings();
  const messages = current.messages.map(apiMessage);
  if (settings.system.trim()) messages.unshift({ role: 'system', content: settings.system });
  const reply = { role: 'assistant', content: '', reasoning: '' };
  current.messages.push(reply);
  const controller = new AbortController();
  setRunning({ controller });
  renderMessages();
  const el = ui.messages.lastElementChild;
  let frame = 0;
  let saved = Date.now();
  const redraw = () => {
    frame = 0;
    updateMessage(el, reply, true);
    ui.messages.scrollTop = ui.messages.scrollHeight;
    if (Date.now() - saved > 2000) {
      saved = Date.now();
      save(interrupted());
    }
  };
  try {
    const body = { messages, ...sampling(settings) };
    if (modelId) body.model = modelId;
    for await (const chunk of api.chat(body, controller.signal)) {
      const choice = chunk.choices?.[0];
      if (!choice) continue;
      reply.content += choice.delta?.content ?? '';
      reply.reasoning += choice.delta?.reasoning_content ?? '';
      if (choice.finish_reason === 'length') reply.note = 'Cut at the token limit (max_tokens or the context).';
      frame ||= requestAnimationFrame(redraw);
    }
  } catch (e) {
    if (controller.signal.aborted) {
      reply.note = 'Stopped.';
    } else {
      reply.note = e instanceof ApiError && e.status ? `Error ${e.status}: ${e.message}` : `Error: ${e.message}`;
      reply.error = true;
    }
  }
  if (frame) cancelAnimationFrame(frame);
  // The page going away ends the stream too: what was stored last ("Interrupted") stays.
  if (leaving) return;
  if (!reply.reasoning) delete reply.reasoning;
  setRunning(null);
  renderMessages();
  await save();
}

ui.stop.addEventListener('click', () => running?.controller.abort());
let leaving = false;
window.addEventListener('pagehide', () => { leaving = true; });
window.addEventListener('pageshow', () => { leaving = false; });

async function regenerate() {
  if (running) return;
  if (current.messages.at(-1)?.role === 'assistant') current.messages.pop();
  await answer();
}

$('composer').addEventListener('submit', async (e) => {
  e.preventDefault();
  const text = ui.prompt.value;
  if (running || (!text.trim() && !pending.length)) return;
  ui.prompt.value = '';
  if (!current.messages.length) current.title = text.trim().slice(0, 60) || 'Image';
  const message = { role: 'user', content: text };
  if (pending.length) message.images = pending;
  pending = [];
  renderAttachments();
  current.messages.push(message);
  await save();
  await answer();
});

ui.prompt.addEventListener('keydown', (e) => {
  if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
    e.preventDefault();
    $('composer').requestSubmit();
  }
});

// --- start: the model's name, and the most recent conversation ----------------------------------
async function start() {
  const [latest] = await conversations.list();
  current = latest ?? newConversation();
  renderMessages();
  await refreshList();
  const kept = await conversations.kept();
  try {
    const models = await api.models();
    modelId = models[0]?.id ?? '';
    // vkllm's and llama-server's word for a model that takes images.
    takesImages = Boolean(models[0]?.capabilities?.includes('multimodal'));
    ui.attach.hidden = !takesImages;
    ui.model.textContent = modelId || '(no model)';
    document.title = modelId ? `${modelId} · vkllm` : 'vkllm';
    showStatus(kept ? '' : 'This browser refuses the page its storage (IndexedDB): conversations last as long as the tab.');
  } catch (e) {
    ui.model.textContent = '(unknown model)';
    showStatus(`The server could not be asked for its model: ${e.message}`);
  }
  document.body.dataset.ready = 'true';
}

start();
