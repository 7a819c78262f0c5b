// The page's HTML: the whole document (`outer`) or the body's inner HTML, at most `limit`
// characters.
(outer, limit) => {
  let html;
  if (outer) {
    const doctype = document.doctype;
    html = (doctype ? `<!DOCTYPE ${doctype.name}>\n` : '') + document.documentElement.outerHTML;
  } else {
    html = (document.body || document.documentElement).innerHTML;
  }
  return { html: html.length > limit ? html.slice(0, limit) : html, length: html.length };
}
