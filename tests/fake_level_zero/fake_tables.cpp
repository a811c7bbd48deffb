// Every ze/zet/zes Get*ProcAddrTable the 1.8.12 loader asks a driver for (all 53 of the
// headers' tables): the loader refuses a driver that lacks one. Tables the backend needs are
// filled by fake_driver.cpp; the rest stay null, which the loader turns into
// ZE_RESULT_ERROR_UNSUPPORTED_FEATURE / UNINITIALIZED for any caller.
#include <cstring>

#include "fake_state.hpp"

namespace {

template <typename T>
void fake_leave_empty(T*) {}

template <typename T>
ze_result_t get_table(ze_api_version_t version, T* table, void (*fill)(T*)) {
  if (table == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  if (ZE_MAJOR_VERSION(version) != ZE_MAJOR_VERSION(ZE_API_VERSION_CURRENT))
    return ZE_RESULT_ERROR_UNSUPPORTED_VERSION;
  std::memset(static_cast<void*>(table), 0, sizeof(T));
  fill(table);
  return ZE_RESULT_SUCCESS;
}

}  // namespace

#define FAKE_TABLE(fn, type, filler)                                           \
  extern "C" __attribute__((visibility("default"))) ze_result_t ZE_APICALL fn( \
      ze_api_version_t version, type* table) {                                 \
    return get_table<type>(version, table, filler);                            \
  }

using fake_ze::fake_fill;

FAKE_TABLE(zeGetGlobalProcAddrTable, ze_global_dditable_t, fake_fill)
FAKE_TABLE(zeGetDriverProcAddrTable, ze_driver_dditable_t, fake_fill)
FAKE_TABLE(zeGetDeviceProcAddrTable, ze_device_dditable_t, fake_fill)
FAKE_TABLE(zeGetDeviceExpProcAddrTable, ze_device_exp_dditable_t, fake_leave_empty)
FAKE_TABLE(zeGetContextProcAddrTable, ze_context_dditable_t, fake_fill)
FAKE_TABLE(zeGetCommandQueueProcAddrTable, ze_command_queue_dditable_t, fake_leave_empty)
FAKE_TABLE(zeGetCommandListProcAddrTable, ze_command_list_dditable_t, fake_fill)
FAKE_TABLE(zeGetImageProcAddrTable, ze_image_dditable_t, fake_leave_empty)
FAKE_TABLE(zeGetImageExpProcAddrTable, ze_image_exp_dditable_t, fake_leave_empty)
FAKE_TABLE(zeGetFenceProcAddrTable, ze_fence_dditable_t, fake_leave_empty)
FAKE_TABLE(zeGetEventPoolProcAddrTable, ze_event_pool_dditable_t, fake_fill)
FAKE_TABLE(zeGetEventProcAddrTable, ze_event_dditable_t, fake_fill)
FAKE_TABLE(zeGetEventExpProcAddrTable, ze_event_exp_dditable_t, fake_leave_empty)
FAKE_TABLE(zeGetModuleProcAddrTable, ze_module_dditable_t, fake_fill)
FAKE_TABLE(zeGetModuleBuildLogProcAddrTable, ze_module_build_log_dditable_t, fake_fill)
FAKE_TABLE(zeGetKernelProcAddrTable, ze_kernel_dditable_t, fake_fill)
FAKE_TABLE(zeGetKernelExpProcAddrTable, ze_kernel_exp_dditable_t, fake_leave_empty)
FAKE_TABLE(zeGetSamplerProcAddrTable, ze_sampler_dditable_t, fake_leave_empty)
FAKE_TABLE(zeGetPhysicalMemProcAddrTable, ze_physical_mem_dditable_t, fake_leave_empty)
FAKE_TABLE(zeGetMemProcAddrTable, ze_mem_dditable_t, fake_fill)
FAKE_TABLE(zeGetVirtualMemProcAddrTable, ze_virtual_mem_dditable_t, fake_leave_empty)
FAKE_TABLE(zeGetFabricVertexExpProcAddrTable, ze_fabric_vertex_exp_dditable_t, fake_leave_empty)
FAKE_TABLE(zeGetFabricEdgeExpProcAddrTable, ze_fabric_edge_exp_dditable_t, fake_leave_empty)
FAKE_TABLE(zetGetDeviceProcAddrTable, zet_device_dditable_t, fake_leave_empty)
FAKE_TABLE(zetGetContextProcAddrTable, zet_context_dditable_t, fake_leave_empty)
FAKE_TABLE(zetGetCommandListProcAddrTable, zet_command_list_dditable_t, fake_leave_empty)
FAKE_TABLE(zetGetModuleProcAddrTable, zet_module_dditable_t, fake_leave_empty)
FAKE_TABLE(zetGetKernelProcAddrTable, zet_kernel_dditable_t, fake_leave_empty)
FAKE_TABLE(zetGetMetricGroupProcAddrTable, zet_metric_group_dditable_t, fake_leave_empty)
FAKE_TABLE(zetGetMetricGroupExpProcAddrTable, zet_metric_group_exp_dditable_t, fake_leave_empty)
FAKE_TABLE(zetGetMetricProcAddrTable, zet_metric_dditable_t, fake_leave_empty)
FAKE_TABLE(zetGetMetricStreamerProcAddrTable, zet_metric_streamer_dditable_t, fake_leave_empty)
FAKE_TABLE(zetGetMetricQueryPoolProcAddrTable, zet_metric_query_pool_dditable_t, fake_leave_empty)
FAKE_TABLE(zetGetMetricQueryProcAddrTable, zet_metric_query_dditable_t, fake_leave_empty)
FAKE_TABLE(zetGetTracerExpProcAddrTable, zet_tracer_exp_dditable_t, fake_leave_empty)
FAKE_TABLE(zetGetDebugProcAddrTable, zet_debug_dditable_t, fake_leave_empty)
FAKE_TABLE(zesGetDriverProcAddrTable, zes_driver_dditable_t, fake_leave_empty)
FAKE_TABLE(zesGetDeviceProcAddrTable, zes_device_dditable_t, fake_leave_empty)
FAKE_TABLE(zesGetSchedulerProcAddrTable, zes_scheduler_dditable_t, fake_leave_empty)
FAKE_TABLE(zesGetPerformanceFactorProcAddrTable, zes_performance_factor_dditable_t,
           fake_leave_empty)
FAKE_TABLE(zesGetPowerProcAddrTable, zes_power_dditable_t, fake_leave_empty)
FAKE_TABLE(zesGetFrequencyProcAddrTable, zes_frequency_dditable_t, fake_leave_empty)
FAKE_TABLE(zesGetEngineProcAddrTable, zes_engine_dditable_t, fake_leave_empty)
FAKE_TABLE(zesGetStandbyProcAddrTable, zes_standby_dditable_t, fake_leave_empty)
FAKE_TABLE(zesGetFirmwareProcAddrTable, zes_firmware_dditable_t, fake_leave_empty)
FAKE_TABLE(zesGetMemoryProcAddrTable, zes_memory_dditable_t, fake_leave_empty)
FAKE_TABLE(zesGetFabricPortProcAddrTable, zes_fabric_port_dditable_t, fake_leave_empty)
FAKE_TABLE(zesGetTemperatureProcAddrTable, zes_temperature_dditable_t, fake_leave_empty)
FAKE_TABLE(zesGetPsuProcAddrTable, zes_psu_dditable_t, fake_leave_empty)
FAKE_TABLE(zesGetFanProcAddrTable, zes_fan_dditable_t, fake_leave_empty)
FAKE_TABLE(zesGetLedProcAddrTable, zes_led_dditable_t, fake_leave_empty)
FAKE_TABLE(zesGetRasProcAddrTable, zes_ras_dditable_t, fake_leave_empty)
FAKE_TABLE(zesGetDiagnosticsProcAddrTable, zes_diagnostics_dditable_t, fake_leave_empty)
