// Building DOM without a framework: h('button', {class: 'x', onclick: go}, 'Deploy').

type AttributeValue = string | number | boolean | undefined | null;
type Listener = (event: Event) => void;
export type Attributes = Record<string, AttributeValue | Listener>;
export type Child = Node | string | number | false | null | undefined | Child[];

export function h<K extends keyof HTMLElementTagNameMap>(tag: K, attributes: Attributes = {}, ...children: Child[]): HTMLElementTagNameMap[K] {
  const element = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (typeof value === 'function') element.addEventListener(name.slice(2), value);
    else if (value !== undefined && value !== null && value !== false) element.setAttribute(name, value === true ? '' : String(value));
  }
  append(element, children);
  return element;
}

function append(parent: Node, children: Child[]): void {
  for (const child of children) {
    if (Array.isArray(child)) append(parent, child);
    else if (child instanceof Node) parent.appendChild(child);
    else if (child !== false && child !== null && child !== undefined) parent.appendChild(document.createTextNode(String(child)));
  }
}

/** Sets the text only when it differs, so unchanged parts of the page are not touched. */
export function setText(element: Element, text: string): void {
  if (element.textContent !== text) element.textContent = text;
}

export function setAttribute(element: Element, name: string, value: string | undefined): void {
  if (value === undefined) element.removeAttribute(name);
  else if (element.getAttribute(name) !== value) element.setAttribute(name, value);
}

let lastId = 0;
/** A unique id for label/aria references. */
export const uniqueId = (prefix: string): string => `${prefix}-${++lastId}`;
