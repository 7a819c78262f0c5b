// Resolves the element an action acts on: the `index`-th match of the CSS `selector`, or, when
// `selector` is null, the `index`-th interactive element (interactive.js). Answers
// `{el, count}` or `{error: 'invalid' | 'none' | 'index', count, message}`.
(selector, index) => {
  let all;
  if (selector === null) {
    all = interactive();
  } else {
    try {
      all = document.querySelectorAll(selector);
    } catch (e) {
      return { error: 'invalid', message: String((e && e.message) || e) };
    }
  }
  if (all.length === 0) return { error: 'none', count: 0 };
  if (index >= all.length) return { error: 'index', count: all.length };
  return { el: all[index], count: all.length };
}
