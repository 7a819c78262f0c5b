// A compact HTML rendition of what the page shows, for conversion to Markdown: visible elements
// only; no scripts, styles, SVG, canvases or frames; links and images with absolute URLs; no
// attributes but the few Markdown uses. Elements nested deeper than `maxDepth` become their
// text, and the output stops after about `limit` characters (`truncated`).
(limit, maxDepth) => {
  const SKIP = new Set(['SCRIPT', 'STYLE', 'NOSCRIPT', 'TEMPLATE', 'SVG', 'CANVAS', 'IFRAME',
    'FRAME', 'OBJECT', 'EMBED', 'LINK', 'META', 'HEAD', 'SELECT', 'INPUT', 'TEXTAREA',
    'DIALOG']);
  const VOID = new Set(['BR', 'HR', 'IMG']);
  const KEEP = { TD: ['colspan', 'rowspan'], TH: ['colspan', 'rowspan'], OL: ['start'] };
  const esc = (s) => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
  const attr = (name, value) => ` ${name}="${esc(String(value)).replace(/"/g, '&quot;')}"`;
  const out = [];
  let size = 0;
  let truncated = false;
  const push = (s) => { out.push(s); size += s.length; };
  const visible = (el) => {
    if (!el.checkVisibility || el.checkVisibility({ visibilityProperty: true })) return true;
    return getComputedStyle(el).display === 'contents';
  };
  const walk = (node, depth) => {
    if (size > limit) { truncated = true; return; }
    if (node.nodeType === Node.TEXT_NODE) { push(esc(node.data)); return; }
    if (node.nodeType !== Node.ELEMENT_NODE) return;
    const tag = node.tagName.toUpperCase();
    if (SKIP.has(tag) || !visible(node)) return;
    if (depth > maxDepth) { push(esc(node.innerText || '')); return; }
    const name = tag.toLowerCase();
    let attrs = '';
    if (tag === 'A' && node.href) attrs += attr('href', node.href);
    if (tag === 'IMG') {
      if (!node.src || node.src.startsWith('data:')) return;
      attrs += attr('src', node.src) + attr('alt', node.alt || '');
    }
    if ((tag === 'PRE' || tag === 'CODE') && node.className) attrs += attr('class', node.className);
    for (const a of KEEP[tag] || []) if (node.hasAttribute(a)) attrs += attr(a, node.getAttribute(a));
    push(`<${name}${attrs}>`);
    if (VOID.has(tag)) return;
    for (const child of node.childNodes) walk(child, depth + 1);
    push(`</${name}>`);
  };
  const root = document.body || document.documentElement;
  if (root) walk(root, 0);
  return { html: out.join(''), truncated, url: location.href, title: document.title };
}
