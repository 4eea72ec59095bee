// Model output as Markdown: marked (Debian's libjs-marked) turns it into HTML and DOMPurify
// (node-dompurify) removes whatever could run or load: both are classic scripts loaded before this
// module (index.html), served by vkllm itself. Raw HTML in the text is shown as text rather than
// as markup, and images become links, so that an answer can neither inject markup nor make the
// page fetch from another origin.

const { marked, DOMPurify } = globalThis;

function escapeHtml(s) {
  return s.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]);
}

marked.setOptions({ gfm: true, breaks: true, headerIds: false, mangle: false });
marked.use({
  renderer: {
    html: (html) => escapeHtml(html),
    image: (href, title, text) => `<a href="${escapeHtml(href ?? '')}">${escapeHtml(text || href || 'image')}</a>`,
  },
});

// Links open outside the page, without telling the target where they came from.
DOMPurify.addHook('afterSanitizeAttributes', (node) => {
  if (node.tagName === 'A') {
    node.setAttribute('target', '_blank');
    node.setAttribute('rel', 'noopener noreferrer');
  }
});

const PURIFY = { USE_PROFILES: { html: true }, FORBID_TAGS: ['img', 'style', 'form', 'input', 'button'] };

// Sets `element`'s content to `text` rendered as Markdown.
export function renderMarkdown(element, text) {
  element.innerHTML = DOMPurify.sanitize(marked.parse(text), PURIFY);
}
