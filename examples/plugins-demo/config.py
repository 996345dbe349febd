app_name = "plugins-demo"
description = "Routes that call a C plugin (textkit) and a Python plugin (markdown)"

# Each plugin is a WebAssembly component with its WIT in plugins/NAME/wit/.
# Build them first: bash examples/plugins-demo/plugins/build.sh
plugins = {
    "markdown": {"component": "plugins/markdown/markdown.wasm"},
    "textkit": {"component": "plugins/textkit/textkit.wasm"},
}
