// RedPanda DHLS component library: a functional unit shared by N operations
// (time-multiplexing, ../shared/papers/08-redpanda.md). A round-robin arbiter grants one
// requester per cycle; the unit is a LAT-stage pipeline that never stalls because each
// requester may only issue while it holds a credit for a slot in its own output FIFO
// (credit-based sharing: no requester can block another's results, so sharing cannot deadlock).
// OP: 0 = multiply, 1 = signed divide, 2 = signed remainder.
module rp_share #(parameter N = 2, parameter W = 32, parameter LAT = 2, parameter OP = 0) (
    input clk, input rst,
    input [N-1:0] req_valid, output [N-1:0] req_ready,
    input [N*W-1:0] a, input [N*W-1:0] b,
    output [N*W-1:0] out_data, output [N-1:0] out_valid, input [N-1:0] out_ready);
  localparam DEPTH = (LAT + 1 < 2) ? 2 : LAT + 1;
  localparam IW = (N > 1) ? $clog2(N) : 1;
  localparam CW = $clog2(DEPTH + 1);
  reg [IW-1:0] last;
  reg [N-1:0] grant;
  reg [IW-1:0] sel;
  reg found;
  reg [IW:0] idx;
  integer k;
  wire [N-1:0] can;
  genvar g;
  always @* begin
    grant = 0; sel = 0; found = 0; idx = 0;
    for (k = 0; k < N; k = k + 1) begin
      idx = last + 1 + k;
      if (idx >= N) idx = idx - N;
      if (!found && can[idx[IW-1:0]]) begin
        found = 1; grant[idx[IW-1:0]] = 1; sel = idx[IW-1:0];
      end
    end
  end
  assign req_ready = grant;
  wire [W-1:0] opa = a[sel*W +: W];
  wire [W-1:0] opb = b[sel*W +: W];
  wire [W-1:0] res;
  generate
    if (OP == 0) begin : m
      rp_mul #(.W(W)) unit (.a(opa), .b(opb), .y(res));
    end else begin : d
      rp_divmod #(.W(W), .REM(OP == 2)) unit (.a(opa), .b(opb), .y(res));
    end
  endgenerate
  reg [LAT-1:0] pv;
  reg [IW-1:0] ptag [0:LAT-1];
  reg [W-1:0] pdata [0:LAT-1];
  integer i;
  always @(posedge clk) begin
    if (rst) pv <= 0;
    else begin
      pv[0] <= found; ptag[0] <= sel; pdata[0] <= res;
      for (i = 1; i < LAT; i = i + 1) begin
        pv[i] <= pv[i-1]; ptag[i] <= ptag[i-1]; pdata[i] <= pdata[i-1];
      end
    end
  end
  generate
    for (g = 0; g < N; g = g + 1) begin : q
      wire push = pv[LAT-1] && (ptag[LAT-1] == g);
      wire pop = out_valid[g] && out_ready[g];
      wire unused_ready;
      reg [CW-1:0] credit;
      assign can[g] = req_valid[g] && (credit != 0);
      rp_eb #(.W(W), .DEPTH(DEPTH)) fifo (
        .clk(clk), .rst(rst), .in_data(pdata[LAT-1]), .in_valid(push), .in_ready(unused_ready),
        .out_data(out_data[g*W +: W]), .out_valid(out_valid[g]), .out_ready(out_ready[g]));
      always @(posedge clk) begin
        if (rst) credit <= DEPTH;
        else credit <= credit - grant[g] + pop;
      end
    end
  endgenerate
  always @(posedge clk) begin
    if (rst) last <= N - 1;
    else if (found) last <= sel;
  end
endmodule
