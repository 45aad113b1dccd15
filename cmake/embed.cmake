# hutch_embed(TARGET SYMBOL FILE): a static library TARGET defining
# `extern const char SYMBOL[]` with FILE's contents, so binaries carry their policies.
function(hutch_embed target symbol file)
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${file})
  file(READ ${file} HUTCH_EMBED_CONTENT)
  set(out ${CMAKE_CURRENT_BINARY_DIR}/${symbol}.cc)
  file(WRITE ${out}.tmp "extern const char ${symbol}[];\nconst char ${symbol}[] = R\"hutch_embed(${HUTCH_EMBED_CONTENT})hutch_embed\";\n")
  file(COPY_FILE ${out}.tmp ${out} ONLY_IF_DIFFERENT)
  add_library(${target} STATIC ${out})
endfunction()
