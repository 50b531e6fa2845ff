// The learner lab on a narrow screen (a phone's 414 px): JupyterLab opens with the file browser taking most of the
// width (the lesson got 96 px of 414), and no setting of JupyterLab's depends on the screen's width. This plugin,
// once the layout is restored and only when the window is at most NARROW px wide, collapses the left sidebar (it
// comes back with Ctrl-B or a click on its icon, as always) and hides the right activity bar, whose panels (property
// inspector, debugger) no lesson uses, while its sidebar is closed (View > Appearance > Show Right Activity Bar
// brings it back): the lesson gets 381 px of 414 instead of 348. Wider screens are left as JupyterLab lays them out.
//
// Written by hand, without a build: JupyterLab loads a prebuilt extension by running this file, which registers a
// container under window._JUPYTERLAB[<package name>] with init() and get("./extension"), as webpack's module
// federation does; the plugin needs nothing shared (no imports), so init has nothing to do.
var _JUPYTERLAB;
(function () {
  "use strict";
  var NARROW = 600; // px: below this the lessons' own views already drop the prompt column (palette.NARROW_CSS)
  var plugin = {
    id: "sandbox-lab-narrow:collapse-left",
    description: "On a narrow screen, the lesson gets the width: the left sidebar collapsed, the right activity bar hidden.",
    autoStart: true,
    activate: function (app) {
      app.restored.then(function () {
        var shell = app.shell;
        if (window.innerWidth > NARROW || !shell || typeof shell.collapseLeft !== "function") {
          return;
        }
        shell.collapseLeft();
        if (shell.rightCollapsed && shell.isSideTabBarVisible("right")) {
          shell.toggleSideTabBarVisibility("right");
        }
      });
    }
  };
  var container = {
    init: function () { return Promise.resolve(); },
    get: function (module) {
      if (module !== "./extension") {
        return Promise.reject(new Error("sandbox-lab-narrow has no module " + module));
      }
      return Promise.resolve(function () { return { __esModule: true, default: [plugin] }; });
    }
  };
  _JUPYTERLAB = typeof _JUPYTERLAB === "undefined" ? {} : _JUPYTERLAB;
  _JUPYTERLAB["sandbox-lab-narrow"] = container;
})();
