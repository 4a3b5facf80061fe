// xterm.js under the console's Content Security Policy, which allows only this origin's stylesheets:
// no <style> element and no style attribute that a script writes as text.
//
// xterm's DOM renderer styles itself in two such ways: it adds <style> elements and sets their text
// (the theme's colours, the size of a cell, the scrollbar), and it sets the style attribute of a cell
// drawn in a 24-bit colour. The policy refuses both, each with a violation, and the terminal draws
// without its colours and cell sizes. While a terminal is open, install() turns them into what the
// policy allows, the CSS object model:
//   - document.createElement("style") returns an <airlock-style> element whose text is the rules of a
//     constructed stylesheet, adopted by the document while the element is in it;
//   - setAttribute("style", text) sets the element's style.cssText instead.
// Neither lets markup style anything: the HTML parser still applies the policy to the <style> elements
// and style attributes it reads. Only script is concerned, and script may style anything through the
// object model already.

class AdoptedStyle extends HTMLElement {
  #sheet = new CSSStyleSheet();
  #text = "";

  connectedCallback() {
    this.hidden = true;
    if (!document.adoptedStyleSheets.includes(this.#sheet)) {
      document.adoptedStyleSheets = [...document.adoptedStyleSheets, this.#sheet];
    }
  }

  disconnectedCallback() {
    document.adoptedStyleSheets = document.adoptedStyleSheets.filter((s) => s !== this.#sheet);
  }

  // The stylesheet, as HTMLStyleElement.sheet is (xterm adds rules to it with insertRule).
  get sheet() {
    return this.#sheet;
  }

  get textContent() {
    return this.#text;
  }

  set textContent(text) {
    this.#text = String(text ?? "");
    this.#sheet.replaceSync(this.#text);
  }

  get innerText() {
    return this.#text;
  }

  set innerText(text) {
    this.textContent = text;
  }
}

customElements.define("airlock-style", AdoptedStyle);

let installs = 0;
let restore = null;

// install makes style elements and style attributes that scripts create go through the CSS object
// model (see above) until the function it returns is called. Calls nest.
export function install() {
  if (installs++ === 0) {
    const createElement = Document.prototype.createElement;
    const setAttribute = Element.prototype.setAttribute;
    document.createElement = function (name, options) {
      if (String(name).toLowerCase() === "style") return new AdoptedStyle();
      return createElement.call(this, name, options);
    };
    Element.prototype.setAttribute = function (name, value) {
      if (String(name).toLowerCase() === "style" && this.style) {
        this.style.cssText = String(value);
        return;
      }
      setAttribute.call(this, name, value);
    };
    restore = () => {
      delete document.createElement;
      Element.prototype.setAttribute = setAttribute;
    };
  }
  let done = false;
  return () => {
    if (done) return;
    done = true;
    if (--installs === 0) {
      restore();
      restore = null;
    }
  };
}
