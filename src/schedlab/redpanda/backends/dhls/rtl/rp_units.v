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

// Load unit: issues a synchronous read when it fires (memory answers next cycle), then one
// register stage: latency 2. A false predicate issues no read and returns 0. The port it reads
// through belongs to a memory controller (rp_memport): it asks with req (valid && pred, never a
// ready), fires only with gnt, and raises go when it reads. HOLD = 1 (a port shared with other
// accesses) keeps the word read in its own register if the pipeline stalls the cycle the word
// arrives, since the next access on the port overwrites the port's read register.
module rp_load #(parameter AW = 4, parameter W = 32, parameter HOLD = 0) (
    input clk, input rst,
    input in_valid, output in_ready, input [AW-1:0] addr, input pred,
    output req, input gnt, output go, output [AW-1:0] mem_addr, input [W-1:0] mem_rdata,
    output [W-1:0] out_data, output out_valid, input out_ready);
  reg s1_valid, s1_pred, s2_valid;
  reg [W-1:0] s2_data;
  wire adv = !s2_valid || out_ready;
  wire granted = gnt || !pred;
  wire fire = in_valid && adv && granted;
  wire [W-1:0] word;
  assign in_ready = adv && granted;
  assign req = in_valid && pred;
  assign go = fire && pred;
  assign mem_addr = addr;
  assign out_valid = s2_valid;
  assign out_data = s2_data;
  generate
    if (HOLD) begin : hold
      reg held;
      reg [W-1:0] kept;
      assign word = held ? kept : mem_rdata;
      always @(posedge clk) begin
        if (rst || adv) held <= 0;
        else if (s1_valid && !held) begin held <= 1; kept <= mem_rdata; end
      end
    end else begin : direct
      assign word = mem_rdata;  // a private port's read register holds until the next read
    end
  endgenerate
  always @(posedge clk) begin
    if (rst) begin s1_valid <= 0; s2_valid <= 0; s1_pred <= 0; s2_data <= 0; end
    else if (adv) begin
      s1_valid <= fire;
      s1_pred <= pred;
      s2_valid <= s1_valid;
      s2_data <= s1_pred ? word : {W{1'b0}};
    end
  end
endmodule

// Store unit: writes when it fires (with its port's grant); its completion token leaves one
// cycle later, so an access ordered after it (by that token) always sees the new value.
module rp_store #(parameter AW = 4, parameter W = 32) (
    input clk, input rst,
    input in_valid, output in_ready, input [AW-1:0] addr, input [W-1:0] data, input pred,
    output req, input gnt, output go, output [AW-1:0] mem_addr, output [W-1:0] mem_wdata,
    output out_valid, input out_ready);
  reg done;
  wire adv = !done || out_ready;
  wire granted = gnt || !pred;
  wire fire = in_valid && adv && granted;
  assign in_ready = adv && granted;
  assign req = in_valid && pred;
  assign go = fire && pred;
  assign mem_addr = addr;
  assign mem_wdata = data;
  assign out_valid = done;
  always @(posedge clk) begin
    if (rst) done <= 0;
    else if (adv) done <= fire;
  end
endmodule

// Memory controller of one block-RAM port shared by N loads/stores (Dynamatic-style): a
// round-robin arbiter grants the port to one requester per cycle and multiplexes its address
// and write data; WR marks the requesters that write. Priority rotates on every grant (taken
// or not), so a requester that cannot advance delays the others by at most one cycle. N = 1
// is a private port: always granted, no arbiter.
module rp_memport #(parameter N = 1, parameter AW = 4, parameter W = 32,
                    parameter [63:0] WR = 64'd0) (
    input clk, input rst,
    input [N-1:0] req, input [N-1:0] go, input [N*AW-1:0] addr, input [N*W-1:0] wdata,
    output [N-1:0] gnt,
    output mem_en, output mem_we, output [AW-1:0] mem_addr, output [W-1:0] mem_wdata);
  generate
    if (N == 1) begin : private_port
      assign gnt = 1'b1;
      assign mem_en = go[0];
      assign mem_we = go[0] && WR[0];
      assign mem_addr = addr;
      assign mem_wdata = wdata;
    end else begin : arbiter
      localparam IW = $clog2(N);
      reg [IW-1:0] last;
      reg [N-1:0] grant;
      reg [IW-1:0] sel;
      reg found;
      reg [IW:0] idx;
      integer k;
      always @* begin
        grant = 0; sel = 0; found = 0; idx = 0;
        for (k = 0; k < N; k = k + 1) begin
          idx = last + 1 + k;
          if (idx >= N) idx = idx - N;
          if (!found && req[idx[IW-1:0]]) begin
            found = 1; grant[idx[IW-1:0]] = 1; sel = idx[IW-1:0];
          end
        end
      end
      wire [N-1:0] writes = WR[N-1:0];
      assign gnt = grant;
      assign mem_en = |go;
      assign mem_we = |(go & writes);
      assign mem_addr = addr[sel*AW +: AW];
      assign mem_wdata = wdata[sel*W +: W];
      always @(posedge clk) begin
        if (rst) last <= N - 1;
        else if (found) last <= sel;
      end
    end
  endgenerate
endmodule
