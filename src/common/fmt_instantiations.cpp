// fmt's out-of-line part, compiled once into the project instead of in every file.
//
// Why: header-only fmt (FMT_HEADER_ONLY) compiles fmt's whole implementation into each of the
// ~150 files that format text: measured on the 2-core CI machine, src/report/table.cpp took
// 15.6 s header-only and 4.9 s against a compiled fmt. Debian's libfmt is a shared library
// only, and the GPU machine has no libfmt, so the project compiles fmt's implementation here
// (fmt/format-inl.h, Debian's libfmt-dev 9.1) and the binary stays free of a libfmt
// dependency. The instantiations are the ones fmt's own library build makes for char
// (the project formats no wide strings); a missing one is a link error, never a silent change.
#include <fmt/format-inl.h>

FMT_BEGIN_NAMESPACE
namespace detail {

template FMT_API auto dragonbox::to_decimal(float x) noexcept -> dragonbox::decimal_fp<float>;
template FMT_API auto dragonbox::to_decimal(double x) noexcept -> dragonbox::decimal_fp<double>;

#ifndef FMT_STATIC_THOUSANDS_SEPARATOR
template FMT_API locale_ref::locale_ref(const std::locale& loc);
template FMT_API auto locale_ref::get<std::locale>() const -> std::locale;
#endif

template FMT_API auto thousands_sep_impl(locale_ref) -> thousands_sep_result<char>;
template FMT_API auto decimal_point_impl(locale_ref) -> char;
template FMT_API void buffer<char>::append(const char*, const char*);
template FMT_API void vformat_to(buffer<char>&, string_view,
                                 basic_format_args<FMT_BUFFER_CONTEXT(char)>, locale_ref);

}  // namespace detail
FMT_END_NAMESPACE
