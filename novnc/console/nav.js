// Marks the current page in the header's navigation.
const current = document.body.dataset.nav;
for (const link of document.querySelectorAll('[data-nav]')) {
  if (link.tagName === 'A' && link.dataset.nav === current && link.getAttribute('href') === location.pathname) {
    link.setAttribute('aria-current', 'page');
  }
}
