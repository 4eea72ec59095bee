# jni.installed: a Java program built against an INSTALLED vkllm generates the stories260K story.
# cmake -DBUILD_DIR= -DPREFIX= -DLIBDIR= -DDATADIR= -DJAVAC= -DJAVA= -DSOURCE= -DMODELS_DIR= -P install_test.cmake
# Installs the build into PREFIX (nothing from the build tree is used after that: no
# LD_LIBRARY_PATH, the installed libvkllm_jni.so finds libvkllm.so.0 through its $ORIGIN RUNPATH).
foreach(var BUILD_DIR PREFIX LIBDIR DATADIR JAVAC JAVA SOURCE MODELS_DIR)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "install_test.cmake: -D${var}= is missing")
  endif()
endforeach()
if(NOT EXISTS "${MODELS_DIR}/stories260K.gguf")
  message("skipped: ${MODELS_DIR}/stories260K.gguf not found (the test models live in ../shared/models)")
  # CTest's SKIP_REGULAR_EXPRESSION reads the line above.
  return()
endif()

file(REMOVE_RECURSE "${PREFIX}")
execute_process(COMMAND ${CMAKE_COMMAND} --install "${BUILD_DIR}" --prefix "${PREFIX}"
                RESULT_VARIABLE rc OUTPUT_QUIET)
if(rc)
  message(FATAL_ERROR "cmake --install failed: ${rc}")
endif()
set(jar "${PREFIX}/${DATADIR}/java/vkllm.jar")
set(jni "${PREFIX}/${LIBDIR}/libvkllm_jni.so")
foreach(f "${jar}" "${jni}")
  if(NOT EXISTS "${f}")
    message(FATAL_ERROR "not installed: ${f}")
  endif()
endforeach()

set(classes "${PREFIX}-classes")
file(REMOVE_RECURSE "${classes}")
execute_process(COMMAND "${JAVAC}" -d "${classes}" -cp "${jar}" "${SOURCE}" RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "javac against the installed jar failed: ${rc}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -E env --unset=LD_LIBRARY_PATH
                        "${JAVA}" -Xcheck:jni "-Djava.library.path=${PREFIX}/${LIBDIR}" -cp "${jar}:${classes}"
                        InstalledStory "${MODELS_DIR}/stories260K.gguf"
                OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "the installed program failed (${rc}):\n${err}")
endif()
if(err MATCHES "WARNING|FATAL")
  message(FATAL_ERROR "the JVM complained about JNI use:\n${err}")
endif()
file(READ "${MODELS_DIR}/stories260K.greedy200.txt" expected)
if(NOT out STREQUAL expected)
  message(FATAL_ERROR "the installed program printed\n${out}\ninstead of the published story\n${expected}")
endif()
message("the installed vkllm.jar + libvkllm_jni.so generate the published story (${jar})")
