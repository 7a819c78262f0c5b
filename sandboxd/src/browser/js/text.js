// The page's rendered text (innerText: what a person sees, without hidden elements), at most
// `limit` characters.
(limit) => {
  const root = document.body || document.documentElement;
  const text = root ? root.innerText : '';
  return { text: text.length > limit ? text.slice(0, limit) : text, length: text.length };
}
