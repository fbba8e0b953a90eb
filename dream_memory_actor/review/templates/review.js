// Decide in place: a confirm/reject posts in the background and the item's card is
// replaced by what the server answers (the decision, or the card again with a message).
// Without this script the same forms post normally and the whole page comes back.
"use strict";
document.addEventListener("submit", async (event) => {
  const form = event.target;
  if (!(form instanceof HTMLFormElement) || !form.classList.contains("decide")) return;
  event.preventDefault();
  const card = form.closest("[data-item]");
  const body = new URLSearchParams(new FormData(form, event.submitter));  // before disabling
  const buttons = form.querySelectorAll("button");
  buttons.forEach((b) => { b.disabled = true; });  // a second click has nothing to send
  let html;
  try {
    const response = await fetch(form.getAttribute("action"), {  // not form.action: a field is named so
      method: "POST", body, credentials: "same-origin",
      headers: { "X-Review-Fetch": "1" },
    });
    html = await response.text();
  } catch (err) {
    html = '<p class="notice error" role="alert">The server could not be reached; nothing changed here. Try again.</p>';
    buttons.forEach((b) => { b.disabled = false; });
    card.insertAdjacentHTML("beforeend", html);
    return;
  }
  const holder = document.createElement("div");
  holder.innerHTML = html;
  const replacement = holder.firstElementChild;
  if (replacement && replacement.matches("article")) {
    card.replaceWith(replacement);
  } else {  // refused before reaching the item (session, CSRF): keep the card, say why
    card.querySelectorAll(".notice").forEach((n) => n.remove());
    card.insertBefore(holder, form);
    buttons.forEach((b) => { b.disabled = false; });
  }
  const counter = document.querySelector("[data-pending-count]");
  if (counter) counter.textContent = String(document.querySelectorAll("[data-item]").length);
  refresh();
});

// Undo a confirmed proposal from the audit trail: the server answers a notice; the
// queue (where the proposal waits again), the snapshot and the trail are read again, and
// the notice shown above the trail.
document.addEventListener("submit", async (event) => {
  const form = event.target;
  if (!(form instanceof HTMLFormElement) || !form.classList.contains("undo")) return;
  event.preventDefault();
  form.querySelectorAll("button").forEach((b) => { b.disabled = true; });
  let html;
  try {
    const response = await fetch(form.getAttribute("action"), {
      method: "POST", body: new URLSearchParams(new FormData(form)),
      credentials: "same-origin", headers: { "X-Review-Fetch": "1" },
    });
    html = await response.text();
  } catch (err) {
    html = '<p class="notice error" role="alert">The server could not be reached; nothing changed here. Try again.</p>';
  }
  await refresh(["queue", "snapshot", "audit"]);
  const heading = document.querySelector('[data-refresh="audit"] h2');
  if (heading) heading.insertAdjacentHTML("afterend", html);
});

// After a decision, the snapshot and the audit trail of the page are read again (the
// queue keeps the decision's answer in place of its card).
async function refresh(parts = ["snapshot", "audit"]) {
  try {
    const response = await fetch(location.href, { credentials: "same-origin" });
    if (!response.ok) return;
    const fresh = new DOMParser().parseFromString(await response.text(), "text/html");
    document.querySelectorAll("[data-refresh]").forEach((part) => {
      if (!parts.includes(part.dataset.refresh)) return;
      const next = fresh.querySelector(`[data-refresh="${part.dataset.refresh}"]`);
      if (next) part.replaceWith(next);
    });
  } catch (err) { /* the parts stay as they were; a reload shows them */ }
}
