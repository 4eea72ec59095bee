# Included from the top-level CMakeLists.txt: the chat page of `vkllm serve` (serving/webui/).
# Its own files (serving/webui/assets/) and two libraries Debian ships, read here at configure time
# so that the page needs no network when it runs: marked (libjs-marked) turns the model's Markdown
# into HTML, DOMPurify (node-dompurify) removes from that HTML whatever could run. The files are
# compiled into a generated source of the vkllm_webui library (embed_assets.cmake); sets
# VKLLM_WEBUI_CPP.

find_file(VKLLM_MARKED_JS marked.min.js PATHS /usr/share/javascript/marked NO_DEFAULT_PATH)
find_file(VKLLM_DOMPURIFY_JS purify.min.js PATHS /usr/share/nodejs/dompurify/dist NO_DEFAULT_PATH)
if(NOT VKLLM_MARKED_JS OR NOT VKLLM_DOMPURIFY_JS)
  message(FATAL_ERROR "The chat page needs Debian's libjs-marked and node-dompurify "
                      "(/usr/share/javascript/marked/marked.min.js, /usr/share/nodejs/dompurify/dist/purify.min.js): "
                      "scripts/install_deps.sh installs them (or pass -DVKLLM_MARKED_JS=... -DVKLLM_DOMPURIFY_JS=...)")
endif()
find_program(VKLLM_GZIP gzip REQUIRED)

set(VKLLM_WEBUI_SRC ${PROJECT_SOURCE_DIR}/serving/webui)
file(GLOB VKLLM_WEBUI_OWN CONFIGURE_DEPENDS ${VKLLM_WEBUI_SRC}/assets/*)
set(VKLLM_WEBUI_FILES "")
set(VKLLM_WEBUI_DEPS ${VKLLM_MARKED_JS} ${VKLLM_DOMPURIFY_JS} ${VKLLM_WEBUI_SRC}/embed_assets.cmake)
foreach(f ${VKLLM_WEBUI_OWN})
  get_filename_component(name ${f} NAME)
  list(APPEND VKLLM_WEBUI_FILES "${name}=${f}")
  list(APPEND VKLLM_WEBUI_DEPS ${f})
endforeach()
list(APPEND VKLLM_WEBUI_FILES "marked.min.js=${VKLLM_MARKED_JS}" "purify.min.js=${VKLLM_DOMPURIFY_JS}")
list(JOIN VKLLM_WEBUI_FILES "|" files_arg)

set(VKLLM_WEBUI_CPP ${PROJECT_BINARY_DIR}/webui/webui_assets.cpp)
add_custom_command(
  OUTPUT ${VKLLM_WEBUI_CPP}
  COMMAND ${CMAKE_COMMAND} -DOUT=${VKLLM_WEBUI_CPP} -DWORK=${PROJECT_BINARY_DIR}/webui/files -DGZIP=${VKLLM_GZIP}
          "-DFILES=${files_arg}" -P ${VKLLM_WEBUI_SRC}/embed_assets.cmake
  DEPENDS ${VKLLM_WEBUI_DEPS}
  COMMENT "Embedding the chat page's files"
  VERBATIM)
