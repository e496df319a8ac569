// MathJax for pymdownx.arithmatex (generic mode): $...$ and $$...$$ in the pages. The script
// itself is javascripts/mathjax/tex-chtml.js, shipped with the site (MathJax 3.2.2 from npm,
// unchanged: see mkdocs.yml), so the math renders without a network.
window.MathJax = {
  tex: {
    inlineMath: [["\\(", "\\)"]],
    displayMath: [["\\[", "\\]"]],
    processEscapes: true,
    processEnvironments: true
  },
  options: {
    ignoreHtmlClass: ".*|",
    processHtmlClass: "arithmatex"
  }
};

document$.subscribe(() => {
  MathJax.startup.output.clearCache()
  MathJax.typesetClear()
  MathJax.texReset()
  MathJax.typesetPromise()
})
