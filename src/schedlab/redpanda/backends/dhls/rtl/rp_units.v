// RedPanda DHLS component library: functional units and memory ports
// (../shared/papers/08-redpanda.md). Operands arrive already joined (rp_join), so a unit sees
// one (valid, ready) pair plus the computed result.

// Generic operator: LAT = 0 is combinational; LAT >= 1 is a LAT-stage pipeline that stalls as
// a whole when its last stage cannot leave. PASS = 0 (a fused steer's guard failed) consumes
// the operands and emits nothing.
module rp_unit #(parameter W = 32, parameter LAT = 0) (
    input clk, input rst,
    input in_valid, output in_ready, input pass, input [W-1:0] res,
    output [W-1:0] out_data, output out_valid, input out_ready);
  generate
    if (LAT == 0) begin : comb
      assign out_valid = in_valid && pass;
      assign out_data = res;
      assign in_ready = pass ? out_ready : 1'b1;
    end else begin : pipe
      reg [LAT-1:0] v;
      reg [W-1:0] d [0:LAT-1];
      wire adv = !v[LAT-1] || out_ready;
      integer i;
      assign in_ready = adv;
      assign out_valid = v[LAT-1];
      assign out_data = d[LAT-1];
      always @(posedge clk) begin
        if (rst) v <= 0;
        else if (adv) begin
          v[0] <= in_valid && pass;
          d[0] <= res;
          for (i = 1; i < LAT; i = i + 1) begin
            v[i] <= v[i-1];
            d[i] <= d[i-1];
          end
        end
      end
    end
  endgenerate
endmodule

// Load port: issues a synchronous read when it fires (memory answers next cycle), then one
// register stage: latency 2. A false predicate issues no read and returns 0.
module rp_load #(parameter AW = 4, parameter W = 32) (
    input clk, input rst,
    input in_valid, output in_ready, input [AW-1:0] addr, input pred,
    output mem_en, output [AW-1:0] mem_addr, input [W-1:0] mem_rdata,
    output [W-1:0] out_data, output out_valid, input out_ready);
  reg s1_valid, s1_pred, s2_valid;
  reg [W-1:0] s2_data;
  wire adv = !s2_valid || out_ready;
  wire fire = in_valid && adv;
  assign in_ready = adv;
  assign mem_en = fire && pred;
  assign mem_addr = addr;
  assign out_valid = s2_valid;
  assign out_data = s2_data;
  always @(posedge clk) begin
    if (rst) begin s1_valid <= 0; s2_valid <= 0; s1_pred <= 0; s2_data <= 0; end
    else if (adv) begin
      s1_valid <= fire;
      s1_pred <= pred;
      s2_valid <= s1_valid;
      s2_data <= s1_pred ? mem_rdata : {W{1'b0}};
    end
  end
endmodule

// Store port: writes when it fires; its completion token leaves one cycle later, so an access
// ordered after it (by that token) always sees the new value.
module rp_store #(parameter AW = 4, parameter W = 32) (
    input clk, input rst,
    input in_valid, output in_ready, input [AW-1:0] addr, input [W-1:0] data, input pred,
    output mem_we, output [AW-1:0] mem_addr, output [W-1:0] mem_wdata,
    output out_valid, input out_ready);
  reg done;
  wire adv = !done || out_ready;
  wire fire = in_valid && adv;
  assign in_ready = adv;
  assign mem_we = fire && pred;
  assign mem_addr = addr;
  assign mem_wdata = data;
  assign out_valid = done;
  always @(posedge clk) begin
    if (rst) done <= 0;
    else if (adv) done <= fire;
  end
endmodule
