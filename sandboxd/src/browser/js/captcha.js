// The captcha widgets (reCAPTCHA, hCaptcha, Cloudflare Turnstile) visible on the page: each
// widget's container, or a widget iframe outside any container. A widget counts as solved once
// its response field (the token the provider fills in) has a value. Detects only; never acts.
() => {
  const kinds = [
    ["recaptcha", ["iframe[src*='/recaptcha/']", "iframe[src*='recaptcha.net']"], [".g-recaptcha"], "g-recaptcha-response"],
    ["hcaptcha", ["iframe[src*='hcaptcha.com']"], [".h-captcha"], "h-captcha-response"],
    ["turnstile", ["iframe[src*='challenges.cloudflare.com']"], [".cf-turnstile"], "cf-turnstile-response"],
  ];
  const visible = (el) => {
    const rect = el.getBoundingClientRect();
    const style = getComputedStyle(el);
    return rect.width > 0 && rect.height > 0 && style.visibility !== "hidden" && style.display !== "none";
  };
  const solved = (el, field) => {
    let node = el;
    for (let i = 0; i < 4 && node; i++, node = node.parentElement) {
      const input = node.querySelector(`[name="${field}"]`);
      if (input) return Boolean(input.value);
    }
    return false;
  };
  const widgets = [];
  const boxes = [];
  for (const [kind, frames, containers, field] of kinds) {
    for (const selector of containers) {
      for (const el of document.querySelectorAll(selector)) {
        if (!visible(el)) continue;
        boxes.push(el);
        widgets.push({ kind, evidence: selector, solved: solved(el, field) });
      }
    }
    for (const selector of frames) {
      for (const el of document.querySelectorAll(selector)) {
        if (!visible(el) || boxes.some((box) => box.contains(el))) continue;
        const src = (el.getAttribute("src") || "").slice(0, 300);
        widgets.push({ kind, evidence: src, solved: solved(el, field) });
      }
    }
  }
  return { url: location.href, widgets };
}
