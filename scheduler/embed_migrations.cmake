# Writes OUT, a C++ file defining BuiltinMigrations() from every NNNN_name.sql
# in SRC_DIR, in version order. Run as `cmake -DSRC_DIR=... -DOUT=... -P`.
file(GLOB files "${SRC_DIR}/*.sql")
list(SORT files)
set(entries "")
foreach(file IN LISTS files)
  get_filename_component(name "${file}" NAME)
  if(NOT name MATCHES "^([0-9]+)_[A-Za-z0-9_]+\\.sql$")
    message(FATAL_ERROR "migration ${name}: the name must be NNNN_words.sql")
  endif()
  math(EXPR version "${CMAKE_MATCH_1}")
  file(READ "${file}" sql)
  string(APPEND entries "      {${version}, \"${name}\", R\"nightshift_sql(${sql})nightshift_sql\"},\n")
endforeach()
file(WRITE "${OUT}.tmp"
"// Generated from migrations/*.sql by scheduler/embed_migrations.cmake. Do not edit.
#include \"scheduler/store.h\"

namespace nightshift::scheduler {

const std::vector<Migration>& BuiltinMigrations() {
  static const std::vector<Migration>* migrations = new std::vector<Migration>{
${entries}  };
  return *migrations;
}

}  // namespace nightshift::scheduler
")
file(COPY_FILE "${OUT}.tmp" "${OUT}" ONLY_IF_DIFFERENT)
